// The sequencer's text form: what formatSequencer writes parses back to the
// same sequencer, for any name; every other spelling is refused with
// InvalidTokenError (one spelling per value, so two headers that differ can
// never name the same lock).
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { InvalidArgumentError, InvalidTokenError, MAX_TOKEN, formatSequencer, matchesBinding, parseSequencer, resolveFencing, sequencer, CURRENT_LOCK, NoCurrentLockError } from '../../src/index.js';
import { assertLockName, formatBinding, parseBinding } from '../../src/extend.js';
import { SEQUENCER_FORMAT, parseFencing } from '../../src/index.js';
import { fencingHeaders } from '../../adapters/express/index.js';
import { queueParent } from '../../src/sources/zookeeper/recipes/queue-order.js';

const SOURCE = { kind: 'zookeeper', id: '3f0c2a8e-6d1b-4a57-9b0e-2c7f1d5e8a90' };
const base = sequencer({ kind: 'lock', name: 'jobs/reindex', source: SOURCE, token: 4294967311n });

describe('sequencer text form', () => {
  it('writes the documented form', () => {
    expect(formatSequencer(base)).toBe('fk1:lock:zookeeper:3f0c2a8e-6d1b-4a57-9b0e-2c7f1d5e8a90:4294967311:jobs%2Freindex');
  });

  it('round-trips any well-formed name, kind, source and token', () => {
    const name = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 60 }).filter((s) => !s.includes('\0'));
    fc.assert(fc.property(
      name, fc.constantFrom('lock' as const, 'election' as const), fc.constantFrom('zookeeper', 'etcd', 'redis', 'redlock'),
      fc.stringMatching(/^[A-Za-z0-9_-]{1,40}$/), fc.bigInt({ min: 1n, max: MAX_TOKEN }),
      (n, kind, sourceKind, id, token) => {
        const s = sequencer({ kind, name: n, source: { kind: sourceKind, id }, token });
        const text = formatSequencer(s);
        expect(text).toMatch(/^[\x21-\x7e]+$/); // visible ASCII: a valid header value
        expect(parseSequencer(text)).toEqual(s);
      },
    ));
  });

  it.each([
    ['another version', 'fk2:lock:zookeeper:abc:5:a'],
    ['a field missing', 'fk1:lock:zookeeper:abc:5'],
    ['a field too many', 'fk1:lock:zookeeper:abc:5:a:b'],
    ['an unknown kind', 'fk1:mutex:zookeeper:abc:5:a'],
    ['an upper-case source kind', 'fk1:lock:ZooKeeper:abc:5:a'],
    ['a source id with a dot', 'fk1:lock:zookeeper:a.b:5:a'],
    ['an empty source id', 'fk1:lock:zookeeper::5:a'],
    ['a leading zero', 'fk1:lock:zookeeper:abc:05:a'],
    ['token 0', 'fk1:lock:zookeeper:abc:0:a'],
    ['a token beyond 2^63-1', `fk1:lock:zookeeper:abc:${MAX_TOKEN + 1n}:a`],
    ['lower-case percent-encoding', 'fk1:lock:zookeeper:abc:5:jobs%2freindex'],
    ['a needless escape', 'fk1:lock:zookeeper:abc:5:%61'],
    ['a raw character that must be escaped', 'fk1:lock:zookeeper:abc:5:jobs/reindex'],
    ['broken percent-encoding', 'fk1:lock:zookeeper:abc:5:%E0%A4%A'],
    ['an empty name', 'fk1:lock:zookeeper:abc:5:'],
    ['an encoded NUL', 'fk1:lock:zookeeper:abc:5:%00'],
    ['a bare token', '5'],
  ])('refuses %s', (_, text) => {
    expect(() => parseSequencer(text)).toThrow(InvalidTokenError);
  });

  it('assertLockName: the name rule every source\'s name check calls (well-formed Unicode, no NUL, 1..1024)', () => {
    for (const good of ['jobs/reindex', 'ünïcode', '\ud83d\udd12', 'x'.repeat(1024)]) expect(() => assertLockName(good)).not.toThrow();
    for (const bad of ['\ud800', 'a\udc00', '\udc00\ud800', 'a\0b', '', 'x'.repeat(1025), 42]) expect(() => assertLockName(bad), JSON.stringify(bad)).toThrow(InvalidArgumentError);
    expect(() => assertLockName('ab\udc00')).toThrow('a lone surrogate \\udc00 at index 2');
    // ZooKeeper's name check calls it before its path rules (which refuse every surrogate, paired or not).
    expect(() => queueParent('/fencekeeper/locks', 'jobs/\ud800')).toThrow(/well-formed Unicode: a lone surrogate/);
    expect(() => queueParent('/fencekeeper/locks', 'x'.repeat(1025))).toThrow(/1\.\.1024 characters/);
  });

  it('checks fields when built, and binds on kind, name and source, never the token', () => {
    expect(() => sequencer({ ...base, kind: 'mutex' as never })).toThrow(InvalidArgumentError);
    expect(() => sequencer({ ...base, name: '' })).toThrow(InvalidArgumentError);
    expect(() => sequencer({ ...base, source: { kind: 'zookeeper', id: 'a b' } })).toThrow(InvalidArgumentError);
    const binding = { kind: 'lock' as const, lock: 'jobs/reindex', source: SOURCE };
    expect(matchesBinding(base, binding)).toBe(true);
    expect(matchesBinding({ ...base, token: 1n }, binding)).toBe(true);
    expect(matchesBinding({ ...base, kind: 'election' }, binding)).toBe(false);
    expect(matchesBinding({ ...base, name: 'jobs/other' }, binding)).toBe(false);
    expect(matchesBinding({ ...base, source: { ...SOURCE, id: 'x' } }, binding)).toBe(false);
    expect(matchesBinding({ ...base, source: { ...SOURCE, kind: 'etcd' } }, binding)).toBe(false);
  });

  it('resolveFencing: bare tokens, sequencers, and CURRENT_LOCK outside every scope', () => {
    expect(resolveFencing(7n)).toEqual({ token: 7n, sequencer: null });
    expect(resolveFencing(base)).toEqual({ token: base.token, sequencer: base });
    expect(() => resolveFencing(CURRENT_LOCK)).toThrow(NoCurrentLockError);
    expect(() => resolveFencing('7')).toThrow(InvalidTokenError);
    expect(() => resolveFencing({ ...base, token: 0n })).toThrow(InvalidTokenError);
  });
});

describe('one text form for sequencers and bindings', () => {
  const source = { kind: 'zookeeper', id: 'ens-1' };
  it('a binding is a sequencer\'s text without its token, and round-trips', () => {
    const s = sequencer({ kind: 'lock', name: 'jobs/reindex 1', source, token: 42n });
    const b = { kind: 'lock' as const, lock: 'jobs/reindex 1', source };
    expect(formatBinding(b)).toBe(formatSequencer(s).replace(':42:', ':'));
    expect(parseBinding(formatBinding(b))).toEqual(b);
    expect(SEQUENCER_FORMAT.startsWith('fk1:')).toBe(true);
  });

  it('parseBinding refuses what is not a binding, as parseSequencer does (InvalidTokenError)', () => {
    for (const text of ['fk1:lock:zookeeper:ens-1:42:jobs', 'fk2:lock:zookeeper:ens-1:jobs', 'fk1:lock:zookeeper:ens-1:%2fjobs', 'fk1:nope:zookeeper:ens-1:jobs', '']) {
      expect(() => parseBinding(text), text).toThrow(InvalidTokenError);
    }
  });

  it('parseFencing tells a bare token from a sequencer by the prefix', () => {
    expect(parseFencing('42')).toBe(42n);
    expect(parseFencing(formatSequencer(sequencer({ kind: 'lock', name: 'a', source, token: 7n })))).toEqual({ kind: 'lock', name: 'a', source, token: 7n });
    expect(() => parseFencing('fk1:lock')).toThrow(InvalidTokenError);
    expect(() => parseFencing('07')).toThrow(InvalidTokenError);
  });
});

describe('fencingHeaders with sequencers', () => {
  it('sends a sequencer, or a holder\'s sequencer, in its text form; a bare token or a lock without one as decimal', () => {
    const text = formatSequencer(base);
    expect(fencingHeaders(base)).toEqual({ 'fencing-token': text });
    expect(fencingHeaders({ token: base.token, name: base.name, sequencer: base })).toEqual({ 'fencing-token': text });
    expect(fencingHeaders({ token: 5n, name: 'jobs/reindex' })).toEqual({ 'fencing-token': '5' });
    expect(fencingHeaders(5n)).toEqual({ 'fencing-token': '5' });
  });
});
