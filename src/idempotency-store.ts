/**
 * Where a service keeps what it answered to each Idempotency-Key, so that a
 * client's retry gets the first answer again instead of a second execution.
 * Defined in the core so that a store (PostgreSQL's, a user's own) and the
 * Express middleware that uses it never import each other.
 *
 * A key's life: `begin()` claims an unknown key for one request (state
 * "running"); the request's response is then either stored with
 * `complete()` (state "completed": replayed to every retry with the same
 * fingerprint until the store's retention period ends) or the claim is given
 * up with `release()` (the request did not complete, so a retry runs again).
 *
 * `transaction`: when the request holds a fence whose store has a
 * transaction (PostgresFenceStore's `req.fencing.transaction`), a store that
 * can write through it does, so the stored response commits or rolls back
 * together with the handler's writes. A store that cannot ignores it.
 */
export interface IdempotencyStore<Transaction = unknown> {
  /**
   * Claim `key` for a request with `fingerprint`, or say what the key
   * already holds. A claim that was never completed or released within the
   * store's limit for running requests, and a record past its retention,
   * count as absent.
   */
  begin(key: IdempotencyScopeKey, fingerprint: string, options?: { readonly transaction?: Transaction }): Promise<IdempotencyLookup>;
  /**
   * Store the claimed request's response. False: the claim is no longer this
   * request's (it ran past the store's limit and another request claimed the
   * key), so nothing was stored.
   */
  complete(claim: IdempotencyClaim, response: StoredResponse, options?: { readonly transaction?: Transaction }): Promise<boolean>;
  /** Give up the claim (if it is still this request's): the key is unknown again. */
  release(claim: IdempotencyClaim, options?: { readonly transaction?: Transaction }): Promise<void>;
}

/** A key as the store keeps it: the client's Idempotency-Key within a scope the server chose (a client id, a tenant). */
export interface IdempotencyScopeKey {
  readonly scope: string;
  readonly key: string;
}

/** A key held by one request, from begin() until complete() or release(). */
export interface IdempotencyClaim extends IdempotencyScopeKey {
  readonly fingerprint: string;
  /** Tells this claim from a later claim of the same key. */
  readonly id: string;
}

/** What begin() found. `sameRequest`: the recorded fingerprint equals the one presented. */
export type IdempotencyLookup =
  | { readonly state: 'claimed'; readonly claim: IdempotencyClaim }
  | { readonly state: 'running'; readonly sameRequest: boolean }
  | { readonly state: 'completed'; readonly sameRequest: boolean; readonly response: StoredResponse };

/** A response as stored and replayed. */
export interface StoredResponse {
  readonly status: number;
  /** The selected response headers, as [lower-case name, value] pairs in the order they were set. */
  readonly headers: readonly (readonly [string, string])[];
  /** The body's bytes; null when it was larger than the middleware keeps (the replay then says so). */
  readonly body: Uint8Array | null;
}
