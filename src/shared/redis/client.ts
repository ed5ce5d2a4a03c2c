// The part of ioredis fencekeeper/redis calls, as structural interfaces: a
// user's `new Redis(...)` fits without this package importing ioredis (an
// optional peer dependency of fencekeeper/redis only). Shared by the Redis
// family: the lock source (src/sources/redis/) and the Redis fences
// (adapters/redis/) send every command through send() below.
import { ConnectionLossError } from '../../index.js';
import { Deadline, deadlines, type Deadlines } from './deadlines.js';

/**
 * The commands half of an ioredis client: what the Redis fences need (a
 * `Redis` or a `Cluster` instance fits).
 */
export interface RedisCommands {
  /** ioredis: `call(command, args)`, a raw command and its raw reply. */
  call(command: string, args: (string | number | Buffer)[]): Promise<unknown>;
  /** ioredis keeps its connection options here; read for messages only. */
  readonly options?: { readonly host?: string | undefined; readonly port?: number | undefined };
}

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

const places = new WeakMap<RedisCommands, string>();

/** host:port of a client, for messages (worked out once per client: every acquire passes it on). */
export function where(client: RedisCommands): string {
  let place = places.get(client);
  if (place === undefined) {
    const o = client.options;
    place = `${o?.host ?? 'localhost'}:${o?.port ?? 6379}`;
    places.set(client, place);
  }
  return place;
}

/** A connection used for SUBSCRIBE only. */
export interface RedisSubscriber {
  /** Subscribes to a pub/sub channel (ioredis's subscribe). */
  subscribe(channel: string): Promise<unknown>;
  /** ioredis's events: a pub/sub message, an error, the connection closing or ready. */
  on(event: 'message', listener: (channel: string, message: string) => void): unknown;
  /** ioredis: 'error' when the connection fails (ioredis reconnects by itself). */
  on(event: 'error', listener: (error: Error) => void): unknown;
  /** ioredis: 'close' when a connection ends, 'ready' when a new one can take commands. */
  on(event: 'close' | 'ready', listener: () => void): unknown;
  /** Closes the connection at once (ioredis's disconnect). */
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
 * `command` in lower case, as ioredis names its commands: it looks the name
 * up in its command tables several times per command, lower-casing it each
 * time (a new string for a name in capitals).
 *
 * `scriptText`, for an evalsha (`args[0]` the SHA1): a server that does not
 * know the script (NOSCRIPT: restarted, or SCRIPT FLUSH) is sent it once with
 * eval, with a timeout of its own, on the same promise.
 */
export function send(client: RedisCommands, where: string, command: string, args: (string | number | Buffer)[], timeoutMs: number, scriptText?: string): Promise<unknown> {
  return new PendingCommand(client, where, command, args, timeoutMs, scriptText).promise;
}

/**
 * One command of send(): its promise, and its node timeout on the shared list
 * of timeouts of its length (./deadlines.ts), not a Node timer of its own.
 * This is every command's path: one object and the promise, not a race of
 * two promises, nor an async wrapper for the NOSCRIPT case.
 */
class PendingCommand extends Deadline {
  readonly promise: Promise<unknown>;
  readonly #client: RedisCommands;
  readonly #where: string;
  readonly #timeouts: Deadlines;
  #command: string;
  #args: (string | number | Buffer)[];
  #fallback: string | undefined;
  #resolve!: (value: unknown) => void;
  #reject!: (error: unknown) => void;
  /** Settled: a later reply or failure (after the timeout) changes nothing. */
  #done = false;

  constructor(client: RedisCommands, where: string, command: string, args: (string | number | Buffer)[], timeoutMs: number, scriptText: string | undefined) {
    super();
    this.#client = client;
    this.#where = where;
    this.#command = command;
    this.#args = args;
    this.#fallback = scriptText;
    this.#timeouts = deadlines(timeoutMs);
    this.promise = new Promise((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.#timeouts.start(this);
    this.#issue();
  }

  #issue(): void {
    let reply: Promise<unknown>;
    try {
      reply = this.#client.call(this.#command, this.#args);
    } catch (error) {
      // A client that throws instead of rejecting (a wrapper, a closed client of another library): the same error, our class.
      this.#fallback = undefined;
      this.#failed(error);
      return;
    }
    // Both outcomes handled, also after the timeout has already decided.
    reply.then(this.#succeeded, this.#failed);
  }

  readonly #succeeded = (value: unknown): void => {
    if (this.#done) return;
    this.#done = true;
    this.cancel();
    this.#resolve(value);
  };

  readonly #failed = (error: unknown): void => {
    if (this.#done) return;
    if (this.#fallback !== undefined && /NOSCRIPT/.test(String((error as Error)?.message))) {
      this.#args = [this.#fallback, ...this.#args.slice(1)];
      this.#fallback = undefined;
      this.#command = 'eval';
      this.#timeouts.start(this);
      this.#issue();
      return;
    }
    this.#done = true;
    this.cancel();
    this.#reject(error instanceof ConnectionLossError ? error : new ConnectionLossError(`Redis at ${this.#where}: ${(error as Error)?.message ?? String(error)}`, { cause: error }));
  };

  /**
   * Decided one turn of the event loop later (setImmediate: after the I/O
   * poll that follows the timers): a process that was busy past the timeout
   * (a GC pause, 2,000 replies to handle, a CPU-starved machine) has the
   * replies that arrived meanwhile still unread in its sockets when the
   * timers run, first in the loop's turn, and would call a node that
   * answered in time a node that did not (all five Redlock nodes at once,
   * from one stall of this process). Only a reply that had not arrived by
   * then times the command out.
   */
  override expired(): void {
    if (this.#done) return;
    setImmediate(this.#expiredAfterPoll);
  }

  readonly #expiredAfterPoll = (): void => {
    // Answered meanwhile, or started again (NOSCRIPT: the script's text sent, with a timeout of its own).
    if (this.#done || this.list !== null) return;
    this.#done = true;
    this.#reject(new NodeTimeoutError(`Redis at ${this.#where} did not answer ${this.#command.toUpperCase()} within ${this.#timeouts.ms} ms`));
  };
}
