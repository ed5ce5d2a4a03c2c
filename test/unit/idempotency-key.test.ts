// The Idempotency-Key header's value: a Structured Field String (RFC 8941
// §3.3.3) with optional parameters, or the unquoted form many clients send.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_KEY_LENGTH, parseIdempotencyKey } from '../../src/shared/http/idempotency/key.js';
import { REPEATED, singleHeader } from '../../src/shared/http/header.js';

const ok = (value: string): string | undefined => {
  const parsed = parseIdempotencyKey(value);
  return parsed.ok ? parsed.key : undefined;
};

/** A key quoted as an sf-string: backslash and quote escaped. */
const quote = (key: string): string => `"${key.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

describe('parseIdempotencyKey', () => {
  it('reads the draft\'s examples and the unquoted form', () => {
    expect(ok('"8e03978e-40d5-43e8-bc93-6894a57f9324"')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(ok('"clkyoesmbgybucifusbbtdsbohtyuuwz"')).toBe('clkyoesmbgybucifusbbtdsbohtyuuwz');
    expect(ok('8e03978e-40d5-43e8-bc93-6894a57f9324')).toBe('8e03978e-40d5-43e8-bc93-6894a57f9324');
    expect(ok('a:b/c+d=e~f.g_h')).toBe('a:b/c+d=e~f.g_h');
  });

  it('unescapes \\" and \\\\, keeps spaces inside the quotes, ignores parameters', () => {
    expect(ok('"a\\"b\\\\c"')).toBe('a"b\\c');
    expect(ok('"  spaced key "')).toBe('  spaced key ');
    expect(ok('"k";a=1;b="x";c=?0;d=tok;e=:AAA=:;f=-1.5;g')).toBe('k');
    expect(ok('k; a=1')).toBe('k');
    expect(ok('  "k"  ')).toBe('k');
  });

  it.each([
    ['', 'empty'],
    ['""', 'an empty string'],
    ['"', 'an unterminated string'],
    ['"abc', 'an unterminated string'],
    ['"a\\b"', 'a backslash escaping neither " nor \\'],
    ['"a\u007fb"', 'DEL inside a string'],
    ['"a\u0009b"', 'a tab inside a string'],
    ['"é"', 'a non-ASCII character'],
    ['"a", "b"', 'a list of keys'],
    ['"a" "b"', 'two strings'],
    ['a b', 'an unquoted key with a space'],
    ['a,b', 'an unquoted key with a comma'],
    ['a"b', 'an unquoted key with a quote'],
    ['"a";', 'a parameter without a name'],
    ['"a";A=1', 'an upper-case parameter name'],
    ['"a";a=', 'a parameter without a value after ='],
    ['"a";a="x', 'an unterminated parameter string'],
    [`"${'k'.repeat(MAX_KEY_LENGTH + 1)}"`, 'a key that is too long'],
    ['k'.repeat(MAX_KEY_LENGTH + 1), 'an unquoted key that is too long'],
  ])('refuses %j (%s)', (value) => {
    const parsed = parseIdempotencyKey(value);
    expect(parsed.ok).toBe(false);
    if (!parsed.ok) expect(parsed.reason).toMatch(/Idempotency-Key/);
  });

  it('accepts a key of exactly the longest length', () => {
    expect(ok(quote('k'.repeat(MAX_KEY_LENGTH)))).toBe('k'.repeat(MAX_KEY_LENGTH));
  });

  it('round-trips every printable ASCII key through its quoted form (fast-check)', () => {
    const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: MAX_KEY_LENGTH });
    fc.assert(fc.property(printable, (key) => ok(quote(key)) === key), { numRuns: 2000 });
  });

  it('never throws, and a key it answers is 1..255 printable ASCII characters (fast-check)', () => {
    const anything = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 300 }),
      fc.string({ unit: fc.constantFrom('"', '\\', ';', '=', ',', ' ', 'a', '1', '-', ':', '?', '*', '\t', 'é'), maxLength: 40 }),
      fc.string({ unit: fc.constantFrom('"', 'k', '\\'), maxLength: 300 }),
    );
    fc.assert(
      fc.property(anything, (value) => {
        const parsed = parseIdempotencyKey(value);
        if (!parsed.ok) return typeof parsed.reason === 'string' && parsed.reason.length > 0;
        return parsed.key.length >= 1 && parsed.key.length <= MAX_KEY_LENGTH && /^[\x20-\x7e]+$/.test(parsed.key);
      }),
      { numRuns: 5000 },
    );
  });
});

describe('singleHeader', () => {
  it('finds one occurrence in any case, and tells a repeat', () => {
    expect(singleHeader(['Host', 'x', 'Idempotency-Key', '"a"'], 'idempotency-key')).toBe('"a"');
    expect(singleHeader(['IDEMPOTENCY-KEY', '"a"'], 'idempotency-key')).toBe('"a"');
    expect(singleHeader(['Host', 'x'], 'idempotency-key')).toBeUndefined();
    expect(singleHeader(['idempotency-key', '"a"', 'Idempotency-Key', '"a"'], 'idempotency-key')).toBe(REPEATED);
    expect(singleHeader(['idempotency-key', ''], 'idempotency-key')).toBe('');
  });
});
