// The acquire/campaign options every queueing source checks before its first
// request (src/wait-options.ts): what passes, and a clear error for the rest.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/index.js';
import { checkWaitOptions } from '../../src/wait-options.js';

describe('checkWaitOptions', () => {
  it('passes undefined and well-formed options through', () => {
    expect(checkWaitOptions(undefined, true, 'owner')).toEqual({ signal: undefined, timeoutMs: undefined, owner: undefined, safetyMarginMs: undefined });
    const signal = new AbortController().signal;
    expect(checkWaitOptions({ signal, timeoutMs: 0, owner: 'w-1', safetyMarginMs: 250 }, true, 'owner')).toEqual({ signal, timeoutMs: 0, owner: 'w-1', safetyMarginMs: 250 });
    expect(checkWaitOptions({ id: 'candidate' }, false, 'id').owner).toBe('candidate');
  });

  it.each([
    ['options that are not an object', null, true, 'owner', /options must be an object/],
    ['a signal that is not an AbortSignal', { signal: {} }, true, 'owner', /AbortSignal/],
    ['a timeout on a try-acquire', { timeoutMs: 5 }, false, 'owner', /never waits/],
    ['a negative timeout', { timeoutMs: -1 }, true, 'owner', /timeoutMs must be a non-negative number/],
    ['an infinite timeout', { timeoutMs: Infinity }, true, 'owner', /timeoutMs/],
    ['an owner with NUL', { owner: 'a\0b' }, true, 'owner', /owner must be a string without NUL/],
    ['an id that is not a string', { id: 7 }, true, 'id', /id must be a string/],
    ['a negative safety margin', { safetyMarginMs: -5 }, true, 'owner', /safetyMarginMs/],
  ] as const)('refuses %s', (_, options, allowTimeout, field, message) => {
    expect(() => checkWaitOptions(options, allowTimeout, field)).toThrow(InvalidArgumentError);
    expect(() => checkWaitOptions(options, allowTimeout, field)).toThrow(message);
  });
});
