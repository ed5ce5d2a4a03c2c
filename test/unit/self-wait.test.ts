// The self-wait registry on its own (the warning itself is tested against every
// queueing source's server in their self-wait tests): a grant is noted on itself when
// its class declares the registry's fields, in a side table otherwise (a source
// writer's grant object is never written to); a name stays noted while any of a
// client's grants of it does, and is gone when the last one leaves.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { forgetGrant, noteGrant, warnIfSelfWait, type SelfWaitGrant, type SelfWaitNames } from '../../src/self-wait.js';

class DeclaredGrant implements SelfWaitGrant {
  held = true;
  selfWaitIn: SelfWaitNames | null = null;
  selfWaitName: string | null = null;
}

let emitted: unknown[] = [];
beforeEach(() => {
  emitted = [];
  vi.spyOn(process, 'emitWarning').mockImplementation((...args: unknown[]) => void emitted.push(args));
});
afterEach(() => vi.restoreAllMocks());

describe('the self-wait registry', () => {
  it('notes a grant whose class declares the fields on itself, and clears them when it is forgotten', () => {
    const client = {};
    const grant = new DeclaredGrant();
    noteGrant(client, 'lock', 'jobs', grant);
    expect(grant.selfWaitName).toBe('jobs');
    expect(grant.selfWaitIn?.get('jobs')).toBe(grant);
    forgetGrant(grant);
    expect(grant.selfWaitIn).toBeNull();
    expect(warnIfSelfWait(client, 'lock', 'jobs')).toBe(false);
  });

  it('never writes to a grant object that does not declare them, and forgets it all the same', () => {
    const client = {};
    const grant = { held: true, entry: 7 };
    noteGrant(client, 'lock', 'jobs', grant);
    expect(Object.keys(grant)).toEqual(['held', 'entry']);
    expect(warnIfSelfWait({}, 'lock', 'jobs')).toBe(false);
    forgetGrant(grant);
    expect(warnIfSelfWait(client, 'lock', 'jobs')).toBe(false);
    expect(emitted).toEqual([]);
  });

  it('keeps a name while any of the client\'s grants of it holds; a read and a write are one name; the warning once per client and name', () => {
    const client = {};
    const a = new DeclaredGrant();
    const b = { held: true };
    noteGrant(client, 'read', 'pool', a);
    noteGrant(client, 'write', 'pool', b);
    forgetGrant(a);
    expect(warnIfSelfWait(client, 'read', 'pool')).toBe(true);
    expect(warnIfSelfWait(client, 'write', 'pool')).toBe(false);
    expect(emitted).toHaveLength(1);
    forgetGrant(b);
    const other = {};
    const c = new DeclaredGrant();
    c.held = false;
    noteGrant(other, 'lock', 'pool', c);
    // Noted but no longer held (lost, not yet released): no wait on ourselves.
    expect(warnIfSelfWait(other, 'lock', 'pool')).toBe(false);
    forgetGrant(c);
    forgetGrant(c);
    expect(c.selfWaitIn).toBeNull();
  });
});
