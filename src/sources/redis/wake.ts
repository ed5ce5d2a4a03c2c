// How a waiter hears that a lock was released, without polling: each client
// has one subscriber connection (opened while the client has waiters, closed
// with its last), on a channel of its own. A waiter's entry in the lock's
// waiter list names that channel; the release script pops the first entry
// (by place, see queuePlace) whose channel has a listener, publishes to it and
// reserves the lock for it (./scripts.ts), so one release wakes one waiter,
// across any number of processes, and that waiter is the one that gets the lock.
import { randomBytes } from 'node:crypto';
import { send, where, type RedisClient, type RedisSubscriber } from '../../shared/redis/client.js';
import { LEAVE, WAKE_CHANNEL, lockKeys } from './scripts.js';

const PROCESS_TAG = randomBytes(4).toString('hex');
let lastMs = 0;
let placeSeq = 0;

/**
 * A waiter's place in a lock's queue, one per wait and the same on every
 * node of a Redlock set: the nodes list their waiters in the byte order of
 * their entries, which begin with it, so they all agree who comes first
 * (whatever order the joins reached each node in). The wall clock's
 * milliseconds in fixed-width hex, then a counter within this process (its
 * waiters keep their order of arrival, even if the clock steps back), then
 * the process's random tag (two processes' places tie only if they also
 * drew the same 32 bits). Base 36 and fixed widths (9, 4, 8: 21 bytes), so
 * that byte order is number order and the entry stays short (./scripts.ts:
 * a sorted set of members up to 64 bytes is stored compactly). The wall
 * clock, not the monotonic one, because places are compared across
 * processes and hosts: a host whose clock runs ahead queues its waiters
 * that much later. That is fairness only: a waiter's place changes who is
 * woken first, never who may hold the lock or its token.
 */
export function queuePlace(): string {
  const ms = Math.max(lastMs, Date.now());
  if (ms !== lastMs) {
    lastMs = ms;
    placeSeq = 0;
  }
  return `${ms.toString(36).padStart(9, '0')}${(placeSeq++).toString(36).padStart(4, '0')}${PROCESS_TAG}`;
}

/** One waiter's place on one client's channel. */
export interface WakeTicket {
  /**
   * The entry the acquire scripts put in the waiter list, at `place`
   * (queuePlace): fixed once, when the wait's first attempt with a place is
   * about to be sent, so that a process's places follow the order its
   * attempts reach the nodes in, not the order its joins were confirmed.
   */
  enter(place: string): string;
  leave(): void;
}

/**
 * One subscriber connection and its SUBSCRIBE, asked again on every new
 * connection until the server confirms it. Asked at once (a client with an
 * offline queue sends it when connected, and a lazyConnect one connects for
 * it) and again at each 'ready' where it is not confirmed or under way: with
 * ioredis's `enableOfflineQueue: false` the first one fails at once, the
 * connection not being ready yet, and only the one at 'ready' subscribes.
 */
class Subscription {
  readonly connection: RedisSubscriber;
  readonly #channel: string;
  /** 'asked': a SUBSCRIBE under way on this connection (or queued for it); 'yes': confirmed. */
  #state: 'no' | 'asked' | 'yes' = 'no';
  #closed = false;
  #confirmed!: Promise<void>;
  #confirm!: () => void;

  constructor(client: RedisClient, channel: string, onMessage: (connection: RedisSubscriber, message: string) => void) {
    this.#channel = channel;
    this.#expect();
    // Without ioredis's own resubscribe: see RedisClient.duplicate.
    const connection = client.duplicate({ autoResubscribe: false });
    this.connection = connection;
    // ioredis reconnects on its own; an error event without a listener would be printed.
    connection.on('error', () => {});
    connection.on('message', (_channel, message) => onMessage(connection, message));
    // A lost connection loses the subscription: joins from now on wait for the next one.
    connection.on('close', () => {
      if (this.#closed) return;
      if (this.#state === 'yes') this.#expect();
      this.#state = 'no';
    });
    connection.on('ready', () => {
      if (!this.#closed && this.#state === 'no') this.#ask();
    });
    this.#ask();
  }

  /** Resolves once the server has confirmed the SUBSCRIBE on the current connection (never rejects). */
  get confirmed(): Promise<void> {
    return this.#confirmed;
  }

  close(): void {
    this.#closed = true;
    this.connection.disconnect();
  }

  #expect(): void {
    this.#confirmed = new Promise((resolve) => {
      this.#confirm = resolve;
    });
  }

  /**
   * Its failure (not connected yet without an offline queue, or the
   * connection closed before the server confirmed: the last waiter left, or
   * it dropped) leaves it to the next 'ready'; meanwhile each waiter
   * re-checks on its own.
   */
  #ask(): void {
    this.#state = 'asked';
    this.connection.subscribe(this.#channel).then(
      () => {
        if (this.#closed) return;
        this.#state = 'yes';
        this.#confirm();
      },
      () => {
        if (this.#state === 'asked') this.#state = 'no';
      },
    );
  }
}

class WakeChannel {
  readonly #client: RedisClient;
  readonly #id = randomBytes(9).toString('base64url');
  readonly #waiters = new Map<string, () => void>();
  #subscription: Subscription | null = null;
  #seq = 0;

  constructor(client: RedisClient) {
    this.#client = client;
  }

  /**
   * Subscribed before it resolves, so no release after it can be missed;
   * unless the server does not confirm within `limitMs` (a node down or
   * paused): the waiter then goes on without its wakes from that node and
   * relies on its re-checks (the subscriber keeps trying, and subscribes
   * again on each new connection). The ticket's entry, once entered at a
   * place (queuePlace, the same on every client of one wait), orders it
   * among the lock's waiters. A release that wakes this waiter
   * reserves the lock for it for `handoffMs`: the time its attempt has to
   * take it before anyone else may.
   */
  async join(name: string, onWake: () => void, limitMs: number, handoffMs: number): Promise<WakeTicket> {
    const waiter = `${++this.#seq}`;
    // After the place (the nodes order entries by it); without the name (up to 512 bytes): the key names the
    // lock, and the release script adds it to the wake it publishes (./scripts.ts)
    const tail = ` ${this.#id} ${waiter} ${handoffMs}`;
    this.#subscription ??= new Subscription(this.#client, WAKE_CHANNEL + this.#id, (connection, message) => this.#deliver(connection, message));
    // After the subscriber is made: a duplicate() that throws leaves no waiter behind.
    this.#waiters.set(waiter, onWake);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.#subscription.confirmed,
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, limitMs);
        timer.unref();
      }),
    ]);
    clearTimeout(timer);
    return new Ticket(this, waiter, name, tail);
  }

  #deliver(connection: RedisSubscriber, message: string): void {
    // The entry, then the lock's name (./scripts.ts handOn).
    const fields = message.split(' ');
    const waiter = fields[2] ?? '';
    const name = fields[4] ?? '';
    const onWake = this.#waiters.get(waiter);
    if (onWake !== undefined) {
      onWake();
      return;
    }
    // Woken after it left: hand the wake (and the lock reserved for it) on, or the next waiter would sleep until its re-check.
    if (connection === this.#subscription?.connection && name !== '') this.#handOn(name, fields.slice(0, 4).join(' '), '1');
  }

  /** LEAVE for `entry`: out of the waiter list, and the lock handed on if it was reserved for it (`wake` '1': or if it is free). */
  #handOn(name: string, entry: string, wake: '1' | ''): void {
    const [lock, , waiters] = lockKeys(name);
    // Best effort, never thrown into the waiter's finally (send turns even a throwing client into a rejection): an
    // entry left behind is skipped by the release script or its wake passed on (#deliver), a reservation ends at its TTL.
    send(this.#client, where(this.#client), 'evalsha', [LEAVE.sha, 2, lock, waiters, entry, WAKE_CHANNEL, wake], 5_000, LEAVE.text).catch(() => {});
  }

  /** A ticket leaves (Ticket.leave): `entry` '' if it never entered (nothing of it on the server). */
  leaveWaiter(waiter: string, entry: string, name: string): void {
    if (!this.#waiters.delete(waiter)) return;
    if (entry !== '') this.#handOn(name, entry, '');
    if (this.#waiters.size === 0 && this.#subscription !== null) {
      this.#subscription.close();
      this.#subscription = null;
    }
  }
}

/**
 * A WakeTicket: one object with its fields, no closures (a Redlock waiter
 * keeps one per node: 500,000 of them at 100,000 waiting acquires).
 */
class Ticket implements WakeTicket {
  readonly #channel: WakeChannel;
  readonly #waiter: string;
  readonly #name: string;
  /** The entry's tail until it is entered, then the entry. */
  #text: string;
  #entered = false;

  constructor(channel: WakeChannel, waiter: string, name: string, tail: string) {
    this.#channel = channel;
    this.#waiter = waiter;
    this.#name = name;
    this.#text = tail;
  }

  enter(place: string): string {
    if (!this.#entered) {
      this.#text = place + this.#text;
      this.#entered = true;
    }
    return this.#text;
  }

  leave(): void {
    this.#channel.leaveWaiter(this.#waiter, this.#entered ? this.#text : '', this.#name);
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
