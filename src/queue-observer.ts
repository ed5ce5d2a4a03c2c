/**
 * A cached view of a fair queue, watched from outside it: who is at its
 * head (the lock holder, the leader) and the whole queue in grant order
 * (`fencekeeper status --watch`, a resource admitting only the current
 * holder's token without a round trip per request, as Chubby's
 * CheckSequencer does).
 *
 * A read is cached until the source's watch says the queue may have
 * changed (`changed()`); a failed read is not cached, so the next call asks
 * again; once closed, nothing is cached (no watch keeps a cache honest any
 * more) and every call reads. What differs per source are the hooks: how
 * the queue is read (its head alone may cost less than all of it), how a
 * watch is kept, and what closing it releases.
 */

/** `Entry`: the source's queue entry (its owner, token and where it lives). */
export abstract class QueueObserver<Entry> {
  #head: Promise<Entry | null> | null = null;
  #entries: Promise<Entry[]> | null = null;
  #closed = false;
  readonly #listeners = new Set<() => void>();

  /** The queue in grant order, arming the source's watch if it has none. */
  protected abstract readEntries(): Promise<Entry[]>;

  /** The queue's head (null: empty); by default its first entry. */
  protected readHead(): Promise<Entry | null> {
    return this.readEntries().then((entries) => entries[0] ?? null);
  }

  /** What closing releases (a watch, a listener on the client). */
  protected abstract release(): void;

  /** Whether close() has been called. */
  protected get closed(): boolean {
    return this.#closed;
  }

  /**
   * The queue's head (the holder, or the leader), from the cache while it is
   * fresh; null when the queue is empty.
   */
  head(): Promise<Entry | null> {
    if (this.#closed) return this.readHead();
    if (this.#head === null) {
      const load = this.readHead();
      this.#head = load;
      load.catch(() => {
        if (this.#head === load) this.#head = null;
      });
    }
    return this.#head;
  }

  /** The whole queue in grant order. */
  entries(): Promise<Entry[]> {
    if (this.#closed) return this.readEntries();
    if (this.#entries === null) {
      const load = this.readEntries();
      this.#entries = load;
      load.catch(() => {
        if (this.#entries === load) this.#entries = null;
      });
    }
    return this.#entries;
  }

  /** Calls `listener` whenever the queue may have changed; returns the unsubscribe function. */
  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** `using observer = source.observeLock(name)`: closes it (as close()) when the block is left. */
  [Symbol.dispose](): void {
    this.close();
  }

  /** Stop caching and notifying; head() and entries() still answer, with a fresh read each time. */
  close(): void {
    this.#closed = true;
    this.#head = null;
    this.#entries = null;
    this.#listeners.clear();
    this.release();
  }

  /** The source's watch: the queue may have changed. Drops the cache and tells every listener. */
  protected changed(): void {
    if (this.#closed) return;
    this.#head = null;
    this.#entries = null;
    for (const listener of [...this.#listeners]) listener();
  }
}
