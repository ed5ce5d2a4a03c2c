// The holder's side: fencingHeaders and fencedFetch.
import { describe, expect, it } from 'vitest';
import { fencedFetch, fencingHeaders } from '../../adapters/express/index.js';
import { InvalidArgumentError, InvalidTokenError, LockLostError } from '../../src/index.js';

/** The fetch fencedFetch wraps (any function shaped like the global fetch). */
type FetchLike = NonNullable<Parameters<typeof fencedFetch>[0]>;

function recordingFetch(): { fetch: FetchLike; calls: { input: string | URL | Request; init: RequestInit | undefined }[] } {
  const calls: { input: string | URL | Request; init: RequestInit | undefined }[] = [];
  return {
    calls,
    fetch: (input, init) => {
      calls.push({ input, init });
      return Promise.resolve(new Response('ok'));
    },
  };
}

describe('fencingHeaders', () => {
  it('formats a bigint or a holder of one, in the default or a given header', () => {
    expect(fencingHeaders(34n)).toEqual({ 'fencing-token': '34' });
    expect(fencingHeaders({ token: 9223372036854775807n })).toEqual({ 'fencing-token': '9223372036854775807' });
    expect(fencingHeaders(7n, 'X-Fence')).toEqual({ 'x-fence': '7' });
  });

  it('refuses a value that is not a token, or a header that is not a header name', () => {
    expect(() => fencingHeaders(0n)).toThrow(InvalidTokenError);
    expect(() => fencingHeaders(34 as unknown as bigint)).toThrow(InvalidTokenError);
    expect(() => fencingHeaders(1n, 'bad header')).toThrow(InvalidArgumentError);
  });
});

describe('fencedFetch', () => {
  it('adds the token, keeps other headers and replaces a token already there', async () => {
    const { fetch, calls } = recordingFetch();
    const send = fencedFetch(fetch);
    await send(34n, 'http://x/', { method: 'PUT', headers: { 'content-type': 'text/plain', 'fencing-token': '1' } });
    const headers = new Headers(calls[0]!.init!.headers);
    expect(headers.get('fencing-token')).toBe('34');
    expect(headers.get('content-type')).toBe('text/plain');
    expect(calls[0]!.init!.method).toBe('PUT');
  });

  it('keeps the headers of a Request input', async () => {
    const { fetch, calls } = recordingFetch();
    await fencedFetch(fetch, 'x-fence')(5n, new Request('http://x/', { headers: { accept: 'text/plain' } }));
    const headers = new Headers(calls[0]!.init!.headers);
    expect(headers.get('x-fence')).toBe('5');
    expect(headers.get('accept')).toBe('text/plain');
  });

  it('aborts with the lock: its signal goes along, combined with the caller\'s', async () => {
    const { fetch, calls } = recordingFetch();
    const lock = new AbortController();
    const caller = new AbortController();
    const send = fencedFetch(fetch);
    await send({ token: 8n, held: true, signal: lock.signal }, 'http://x/');
    expect(calls[0]!.init!.signal).toBe(lock.signal);
    await send({ token: 8n, held: true, signal: lock.signal }, 'http://x/', { signal: caller.signal });
    const combined = calls[1]!.init!.signal!;
    expect(combined.aborted).toBe(false);
    lock.abort(new Error('lost'));
    expect(combined.aborted).toBe(true);
  });

  it('does not send at all for a lock known lost', async () => {
    const { fetch, calls } = recordingFetch();
    const send = fencedFetch(fetch);
    await expect(send({ token: 8n, name: 'jobs', held: false }, 'http://x/')).rejects.toBeInstanceOf(LockLostError);
    const lost = new AbortController();
    const reason = new Error('session expired');
    lost.abort(reason);
    await expect(send({ token: 8n, held: false, signal: lost.signal }, 'http://x/')).rejects.toBe(reason);
    await expect(send(0n, 'http://x/')).rejects.toBeInstanceOf(InvalidTokenError);
    expect(calls).toHaveLength(0);
  });
});
