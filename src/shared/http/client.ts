// The holder's side: send the token with each request to a fenced service.
import { InvalidArgumentError, LockLostError, formatSequencer, formatToken, isSequencer, type FencingToken, type Sequencer } from '../../index.js';

/**
 * A token, or anything that holds one: a Lock, a Leadership's epoch wrapped
 * as `{ token }`. When it also has `held` and `signal` (a Lock does), a
 * request is not sent once the lock is known lost, and is aborted when the
 * lock is lost while it is in flight. A Sequencer, or a holder with a
 * `sequencer` (a lock from a source that exposes one), is sent in the
 * sequencer's text form (fk1:...), so a fence bound to its lock admits it.
 */
export type TokenHolder =
  | FencingToken
  | {
      readonly token: FencingToken;
      readonly name?: string;
      readonly held?: boolean;
      readonly signal?: AbortSignal;
      readonly sequencer?: Sequencer;
    };

export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** fetch with a token: `send(lock, url, init)`. */
export type FencedFetch = (holder: TokenHolder, input: string | URL | Request, init?: RequestInit) => Promise<Response>;

const FIELD_NAME = /^[!#$%&'*+\-.^_`|~0-9a-z]+$/;

function headerName(header: string): string {
  const name = header.toLowerCase();
  if (!FIELD_NAME.test(name)) throw new InvalidArgumentError(`not an HTTP header name: ${JSON.stringify(header)}`);
  return name;
}

/** The header's value: the sequencer's text form when the holder has one, the decimal token otherwise. */
function headerValue(holder: TokenHolder): string {
  if (typeof holder === 'bigint') return formatToken(holder);
  if (isSequencer(holder)) return formatSequencer(holder);
  if (holder.sequencer !== undefined) return formatSequencer(holder.sequencer);
  return formatToken(holder.token);
}

/** `{ 'fencing-token': '<decimal>' }` (or the sequencer's `fk1:...`), to spread into a request's headers. */
export function fencingHeaders(holder: TokenHolder, header = 'fencing-token'): Record<string, string> {
  return { [headerName(header)]: headerValue(holder) };
}

/**
 * Wrap a fetch (default: the global one) so that each call carries the
 * holder's token in `header` (replacing any value already there).
 */
export function fencedFetch(fetchImpl: FetchLike = globalThis.fetch, header = 'fencing-token'): FencedFetch {
  const name = headerName(header);
  return (holder, input, init) => {
    try {
      const value = headerValue(holder);
      let signal = init?.signal ?? undefined;
      if (typeof holder === 'object') {
        // A paused holder wakes with `held` already false: do not send at all.
        if (holder.held === false) {
          throw holder.signal?.aborted ? holder.signal.reason : new LockLostError(holder.name ?? '(unnamed)', 'deadline');
        }
        if (holder.signal !== undefined) {
          signal = signal === undefined ? holder.signal : AbortSignal.any([signal, holder.signal]);
        }
      }
      const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
      headers.set(name, value);
      return fetchImpl(input, signal === undefined ? { ...init, headers } : { ...init, headers, signal });
    } catch (error) {
      return Promise.reject(error);
    }
  };
}
