// PostgresFenceStore's admissions for one resource, lined up in this process
// before they reach PostgreSQL.
//
// Without it, N requests for a hot resource are N transactions waiting on the
// fence row's lock: N pooled connections taken, and at every commit
// PostgreSQL wakes every waiter of the committing transaction, which all
// recheck the row and all but one go back to sleep (measured with 32 waiters
// on one row: about 500 µs of server CPU per transaction, against about 100
// with the rows spread out). So at most one admission of this store per
// resource waits in PostgreSQL; the others wait here, holding no connection,
// in arrival order. The one in PostgreSQL is already queued on the row when
// the holder commits, so the handover costs no round trip; the next one is
// sent as soon as it has been answered, while the new holder's handler runs.
// The row lock stays what serializes holders, across processes too: this
// only keeps one process from piling onto it.
interface Waiter {
  readonly resolve: (leave: () => void) => void;
  readonly reject: (reason: unknown) => void;
  readonly signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
}

interface Line {
  /** Admissions waiting for their turn to be sent, first come first. */
  readonly queue: Waiter[];
}

export class WaitLine {
  /** Resources with an admission of ours on its way to (or waiting for) the row lock. */
  readonly #lines = new Map<string, Line>();

  /**
   * Wait until no other admission of ours is on its way to `resource`'s row
   * lock. Answers `leave`, to be called once the admission's open has been
   * answered (admitted, refused or failed): the next in line is sent then.
   * Rejects with the signal's reason, holding nothing, if it aborts first.
   */
  enter(resource: string, signal: AbortSignal | undefined): Promise<() => void> {
    const line = this.#lines.get(resource);
    if (line === undefined) {
      this.#lines.set(resource, { queue: [] });
      return Promise.resolve(this.#leaver(resource));
    }
    return new Promise<() => void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => {
          const at = line.queue.indexOf(waiter);
          if (at >= 0) line.queue.splice(at, 1);
          reject(signal.reason);
        };
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      line.queue.push(waiter);
    });
  }

  /** How many admissions wait here (not in PostgreSQL) for `resource`; for tests and diagnostics. */
  queued(resource: string): number {
    return this.#lines.get(resource)?.queue.length ?? 0;
  }

  #leaver(resource: string): () => void {
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#next(resource);
    };
  }

  #next(resource: string): void {
    const line = this.#lines.get(resource);
    if (line === undefined) return;
    const waiter = line.queue.shift();
    if (waiter === undefined) {
      this.#lines.delete(resource);
      return;
    }
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    waiter.resolve(this.#leaver(resource));
  }
}
