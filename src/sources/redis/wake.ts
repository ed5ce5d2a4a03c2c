// How a waiter hears that a lock was released, without polling: each client
// has one subscriber connection (opened while the client has waiters, closed
// with its last), on a channel of its own. A waiter's entry in the lock's
// waiter list names that channel; the release script pops the oldest entry
// whose channel has a listener and publishes to it, so one release wakes one
// waiter, across any number of processes.
import { randomBytes } from 'node:crypto';
import { send, where, type RedisClient, type RedisSubscriber } from '../../shared/redis/client.js';
import { WAKE_CHANNEL, WAKE_NEXT, lockKeys, run } from './scripts.js';

/** One waiter's place on one client's channel. */
export interface WakeTicket {
  /** The entry the acquire scripts put in the waiter list. */
  readonly entry: string;
  leave(): void;
}

class WakeChannel {
  readonly #client: RedisClient;
  readonly #id = randomBytes(9).toString('base64url');
  readonly #waiters = new Map<string, () => void>();
  #subscriber: RedisSubscriber | null = null;
  #ready: Promise<unknown> | null = null;
  #seq = 0;

  constructor(client: RedisClient) {
    this.#client = client;
  }

  /**
   * Subscribed before it resolves, so no release after it can be missed;
   * unless the server does not confirm within `limitMs` (a node down or
   * paused): the waiter then goes on without its wakes from that node and
   * relies on its re-checks (the subscriber keeps trying, and resubscribes
   * when the node is back).
   */
  async join(name: string, onWake: () => void, limitMs: number): Promise<WakeTicket> {
    const waiter = `${++this.#seq}`;
    // name last: it has no spaces, so the three fields split cleanly
    const entry = `${this.#id} ${waiter} ${name}`;
    if (this.#subscriber === null) {
      // Without ioredis's own resubscribe: see RedisClient.duplicate.
      const subscriber = this.#client.duplicate({ autoResubscribe: false });
      this.#subscriber = subscriber;
      // ioredis reconnects on its own; an error event without a listener would be printed.
      subscriber.on('error', () => {});
      subscriber.on('message', (_channel, message) => this.#deliver(subscriber, message));
      // After a lost connection, subscribed again on the new one, by a command whose failure we handle.
      let lost = false;
      subscriber.on('close', () => {
        lost = true;
      });
      subscriber.on('ready', () => {
        if (!lost || subscriber !== this.#subscriber) return;
        lost = false;
        this.#subscribe(subscriber);
      });
      this.#subscribe(subscriber);
    }
    // After the subscriber is made: a duplicate() that throws leaves no waiter behind.
    this.#waiters.set(waiter, onWake);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.#ready?.catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, limitMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
    return { entry, leave: () => this.#leave(waiter, entry, name) };
  }

  /**
   * SUBSCRIBE on `subscriber`; joins from now on wait for it. Its failure
   * (the subscriber closed before the server confirmed: the last waiter
   * left, or the connection dropped and the next 'ready' subscribes again)
   * changes nothing a waiter relies on: each re-checks on its own.
   */
  #subscribe(subscriber: RedisSubscriber): void {
    const ready = subscriber.subscribe(WAKE_CHANNEL + this.#id);
    ready.catch(() => {});
    this.#ready = ready;
  }

  #deliver(subscriber: RedisSubscriber, message: string): void {
    const [, waiter = '', name = ''] = message.split(' ');
    const onWake = this.#waiters.get(waiter);
    if (onWake !== undefined) {
      onWake();
      return;
    }
    // Woken after it left: hand the wake on, or the next waiter would sleep until its re-check.
    if (subscriber === this.#subscriber && name !== '') void this.#passOn(name);
  }

  async #passOn(name: string): Promise<void> {
    try {
      await run(this.#client, where(this.#client), WAKE_NEXT, [lockKeys(name)[2]], [WAKE_CHANNEL], 5_000);
    } catch {
      // the others re-check on their own
    }
  }

  #leave(waiter: string, entry: string, name: string): void {
    if (!this.#waiters.delete(waiter)) return;
    // Best effort, never thrown into the waiter's finally (send turns even a throwing client into a
    // rejection): an entry left behind is skipped by the release script, or its wake passed on (#deliver).
    send(this.#client, where(this.#client), 'lrem', [lockKeys(name)[2], 0, entry], 5_000).catch(() => {});
    if (this.#waiters.size === 0 && this.#subscriber !== null) {
      this.#subscriber.disconnect();
      this.#subscriber = null;
      this.#ready = null;
    }
  }
}

const channels = new WeakMap<RedisClient, WakeChannel>();

export function wakeChannel(client: RedisClient): WakeChannel {
  let channel = channels.get(client);
  if (channel === undefined) {
    channel = new WakeChannel(client);
    channels.set(client, channel);
  }
  return channel;
}
