// The part of ioredis this entry calls, as structural interfaces: a user's
// `new Redis(...)` fits without this package importing ioredis (an optional
// peer dependency of fencekeeper/redis only).
import { performance } from 'node:perf_hooks';
import { ConnectionLossError } from '../../src/index.js';

/** A Redis connection: an ioredis `Redis` instance. */
export interface RedisClient {
  /** ioredis: `call(command, args)`, a raw command and its raw reply. */
  call(command: string, args: (string | number)[]): Promise<unknown>;
  /**
   * A second connection to the same server with the same options: a waiter
   * subscribes on it to hear of a release (a connection in subscriber mode
   * can send nothing else). Closed again when the client has no waiter left.
   * Asked with `{ autoResubscribe: false }` (a wrapper must pass it on):
   * ioredis's own resubscribe after a reconnect is a promise nobody can
   * handle, rejected with "Connection is closed." (an unhandled rejection,
   * which ends a Node process) when the subscriber is closed before the
   * server confirms it; we resubscribe ourselves on 'ready' instead.
   */
  duplicate(override?: { readonly autoResubscribe: false }): RedisSubscriber;
  /** ioredis keeps its connection options here; read for messages only. */
  readonly options?: { readonly host?: string | undefined; readonly port?: number | undefined };
}

/** host:port of a client, for messages. */
export function where(client: RedisClient): string {
  const o = client.options;
  return `${o?.host ?? 'localhost'}:${o?.port ?? 6379}`;
}

/** A connection used for SUBSCRIBE only. */
export interface RedisSubscriber {
  subscribe(channel: string): Promise<unknown>;
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** ioredis: 'close' when a connection ends, 'ready' when a new one can take commands. */
  on(event: 'close' | 'ready', listener: () => void): unknown;
  disconnect(): void;
}

/** The server answered with an error, or did not answer in time. */
export class NodeTimeoutError extends ConnectionLossError {}

/**
 * `command` on `client`, or a ConnectionLossError after `timeoutMs`. The
 * command is not withdrawn: it may still run on the server later (a node
 * paused by SIGSTOP answers when it resumes), which every caller allows for:
 * a late SET NX leaves a key with a value nobody will use, removed by its TTL
 * or by the compare-and-delete queued behind it on the same connection.
 *
 * `scriptText`, for an EVALSHA (`args[0]` the SHA1): a server that does not
 * know the script (NOSCRIPT: restarted, or SCRIPT FLUSH) is sent it once with
 * EVAL, with a timeout of its own, on the same promise.
 */
export function send(client: RedisClient, where: string, command: string, args: (string | number)[], timeoutMs: number, scriptText?: string): Promise<unknown> {
  // One promise and one timer per command (not a race of two promises, nor an
  // async wrapper for the NOSCRIPT case): this is every command's path.
  return new Promise((resolve, reject) => {
    let sent = command;
    let fallback = scriptText;
    const failed = (error: unknown): void => {
      if (fallback !== undefined && !timedOut && /NOSCRIPT/.test(String((error as Error)?.message))) {
        args = [fallback, ...args.slice(1)];
        fallback = undefined;
        sent = 'EVAL';
        timer.refresh();
        issue();
        return;
      }
      clearTimeout(timer);
      reject(error instanceof ConnectionLossError ? error : new ConnectionLossError(`Redis at ${where}: ${(error as Error)?.message ?? String(error)}`, { cause: error }));
    };
    const succeeded = (value: unknown): void => {
      clearTimeout(timer);
      resolve(value);
    };
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      reject(new NodeTimeoutError(`Redis at ${where} did not answer ${sent} within ${timeoutMs} ms`));
    }, timeoutMs);
    timer.unref();
    const issue = (): void => {
      let reply: Promise<unknown>;
      try {
        reply = client.call(sent, args);
      } catch (error) {
        // A client that throws instead of rejecting (a wrapper, a closed client of another library): the same error, our class.
        fallback = undefined;
        failed(error);
        return;
      }
      // Both outcomes handled, also after the timer has already decided (a late reply or failure changes nothing).
      reply.then(succeeded, failed);
    };
    issue();
  });
}

/** The monotonic clock every deadline of this entry is measured on. */
export const now = (): number => performance.now();
