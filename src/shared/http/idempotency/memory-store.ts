// MemoryIdempotencyStore: the responses of one process, per Idempotency-Key.
import { randomUUID } from 'node:crypto';
import { InvalidArgumentError, type IdempotencyClaim, type IdempotencyLookup, type IdempotencyScopeKey, type IdempotencyStore, type StoredResponse } from '../../../index.js';

/** MemoryIdempotencyStore's options: how long responses are kept, how long a running request's claim lasts, and how many keys at most. */
export interface MemoryIdempotencyStoreOptions {
  /** How long a completed response is replayed, in ms from its claim. Default 24 hours. */
  readonly retentionMs?: number;
  /** How long a claim may run without answering before another request may claim the key. Default 60 000 ms. */
  readonly maxRunningMs?: number;
  /**
   * At most this many keys are kept; past it the oldest completed ones are
   * forgotten first (a retry of a forgotten key runs again). Default 10 000.
   */
  readonly maxKeys?: number;
}

interface Entry {
  readonly fingerprint: string;
  readonly id: string;
  /** performance.now() of the claim. */
  readonly claimedAt: number;
  response: StoredResponse | undefined;
}

/**
 * An IdempotencyStore in this process's memory: for a service that runs as
 * one process. It forgets everything on restart, and replicas behind a load
 * balancer do not share it (use PostgresIdempotencyStore). Times are on the
 * monotonic clock. It has no transaction: behind fencing() with a
 * PostgresFenceStore, a response it keeps can outlive the handler's
 * rolled-back writes.
 */
export class MemoryIdempotencyStore implements IdempotencyStore<unknown> {
  readonly #entries = new Map<string, Entry>();
  readonly #retentionMs: number;
  readonly #maxRunningMs: number;
  readonly #maxKeys: number;

  constructor(options: MemoryIdempotencyStoreOptions = {}) {
    this.#retentionMs = positive(options.retentionMs, 'retentionMs') ?? 24 * 60 * 60 * 1000;
    this.#maxRunningMs = positive(options.maxRunningMs, 'maxRunningMs') ?? 60_000;
    this.#maxKeys = positive(options.maxKeys, 'maxKeys') ?? 10_000;
  }

  begin(key: IdempotencyScopeKey, fingerprint: string): Promise<IdempotencyLookup> {
    const name = mapKey(key);
    const now = performance.now();
    const entry = this.#entries.get(name);
    if (entry !== undefined && !this.#expired(entry, now)) {
      const sameRequest = entry.fingerprint === fingerprint;
      return Promise.resolve(entry.response === undefined ? { state: 'running', sameRequest } : { state: 'completed', sameRequest, response: entry.response });
    }
    // Re-inserted at the end: the map's order is claim order, oldest first.
    this.#entries.delete(name);
    const id = randomUUID();
    this.#entries.set(name, { fingerprint, id, claimedAt: now, response: undefined });
    this.#trim(now);
    return Promise.resolve({ state: 'claimed', claim: Object.freeze({ scope: key.scope, key: key.key, fingerprint, id }) });
  }

  complete(claim: IdempotencyClaim, response: StoredResponse): Promise<boolean> {
    const entry = this.#entries.get(mapKey(claim));
    if (entry === undefined || entry.id !== claim.id || entry.response !== undefined) return Promise.resolve(false);
    entry.response = Object.freeze({ status: response.status, headers: Object.freeze(response.headers.map((h) => Object.freeze([h[0], h[1]] as const))), body: response.body === null ? null : Uint8Array.from(response.body) });
    return Promise.resolve(true);
  }

  release(claim: IdempotencyClaim): Promise<void> {
    const name = mapKey(claim);
    const entry = this.#entries.get(name);
    if (entry !== undefined && entry.id === claim.id && entry.response === undefined) this.#entries.delete(name);
    return Promise.resolve();
  }

  #expired(entry: Entry, now: number): boolean {
    if (now - entry.claimedAt >= this.#retentionMs) return true;
    return entry.response === undefined && now - entry.claimedAt >= this.#maxRunningMs;
  }

  /** Forget expired keys, then the oldest completed ones, down to maxKeys. */
  #trim(now: number): void {
    if (this.#entries.size <= this.#maxKeys) return;
    for (const [name, entry] of this.#entries) {
      if (this.#expired(entry, now)) this.#entries.delete(name);
    }
    for (const [name, entry] of this.#entries) {
      if (this.#entries.size <= this.#maxKeys) return;
      if (entry.response !== undefined) this.#entries.delete(name);
    }
  }
}

function mapKey(key: IdempotencyScopeKey): string {
  return JSON.stringify([key.scope, key.key]);
}

function positive(value: unknown, what: string): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    throw new InvalidArgumentError(`MemoryIdempotencyStore: ${what} must be a positive integer, got ${String(value)}`);
  }
  return value;
}
