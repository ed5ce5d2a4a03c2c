/**
 * A PostgreSQL queue watched from outside it: the core's cached queue view
 * (../../queue-observer.ts) kept fresh by a NOTIFY.
 *
 * The observer registers its name under the source's session (a row in
 * fencekeeper_lock_observers, deleted with the session) and LISTENs on the
 * name's channel on the source's own connection; a trigger on the queue
 * NOTIFYs that channel on every change while someone observes it
 * (migration 011). It listens before it reads, so no change between the two
 * is missed; after a reconnect, and when the session ends, the cache is
 * dropped (a notification may have been lost) and the next read registers again.
 */
import type { SequencerKind } from '../../index.js';
import { QueueObserver } from '../../extend.js';
import { queryRow, type PgSourcePool } from './client.js';
import { readQueue, type PostgresQueueEntry } from './queue.js';
import type { PgSession } from './session.js';

/** What an observer needs of its source. */
export interface ObserverSource {
  readonly pool: PgSourcePool;
  session(): Promise<PgSession>;
}

const OBSERVE = `SELECT fencekeeper_lock_observe($1, $2, $3) AS channel`;
const UNOBSERVE = `SELECT fencekeeper_lock_unobserve($1, $2, $3) AS done`;

export class PgQueueObserver extends QueueObserver<PostgresQueueEntry> {
  readonly #source: ObserverSource;
  readonly #kind: SequencerKind;
  readonly #name: string;
  #watch: { readonly session: PgSession; readonly stop: () => boolean } | null = null;
  #watching: Promise<void> | null = null;

  constructor(source: ObserverSource, kind: SequencerKind, name: string) {
    super();
    this.#source = source;
    this.#kind = kind;
    this.#name = name;
  }

  protected async readEntries(): Promise<PostgresQueueEntry[]> {
    if (!this.closed) await this.#ensureWatch();
    const status = await readQueue(this.#source.pool, this.#kind, this.#name);
    return status.holder === null ? [...status.waiters] : [status.holder, ...status.waiters];
  }

  #ensureWatch(): Promise<void> {
    const watch = this.#watch;
    if (watch !== null && watch.session.endedReason === null) return Promise.resolve();
    this.#watching ??= this.#register().finally(() => {
      this.#watching = null;
    });
    return this.#watching;
  }

  async #register(): Promise<void> {
    const session = await this.#source.session();
    const row = await queryRow(this.#source.pool, 'fencekeeper_lock_observe_v1', OBSERVE, [session.idText, this.#kind, this.#name]);
    const stop = await session.listen(String(row['channel']), () => {
      if (session.endedReason !== null && this.#watch?.session === session) this.#watch = null;
      this.changed();
    });
    if (this.closed) {
      stop();
      return;
    }
    this.#watch = { session, stop };
  }

  protected release(): void {
    const watch = this.#watch;
    this.#watch = null;
    if (watch === null) return;
    // Another observer of the name in this source still listens: its registration stays.
    if (watch.stop() && watch.session.endedReason === null) {
      queryRow(this.#source.pool, 'fencekeeper_lock_unobserve_v1', UNOBSERVE, [watch.session.idText, this.#kind, this.#name]).catch(() => undefined);
    }
  }
}
