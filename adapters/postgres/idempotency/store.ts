// PostgresIdempotencyStore: the responses a service gave per Idempotency-Key,
// kept in fencekeeper_idempotency_keys (migration 005) for the Express
// idempotency() middleware, or anything else that implements the
// Idempotency-Key header draft on a shared database.
import { randomUUID } from 'node:crypto';
import { InvalidArgumentError, type IdempotencyClaim, type IdempotencyLookup, type IdempotencyScopeKey, type IdempotencyStore, type StoredResponse } from '../../../src/index.js';
import { isKysely, isPgQueryable, run, type Database, type Queryable, type Statement } from '../database.js';
import { checkDatabase, checkObject, checkText, optionalInteger } from '../effects/input.js';
import { describe } from '../identifiers.js';

/** PostgresIdempotencyStore's options: how long stored responses are kept (`retentionMs`, default 24 h) and how long a running request's claim lasts. */
export interface PostgresIdempotencyStoreOptions {
  /**
   * How long a completed response is replayed, in ms from the claim (the
   * draft's "Idempotency Key Validity and Expiry": publish it to clients).
   * After it the key is unknown again: a retry runs the request again.
   * Default 24 hours.
   */
  readonly retentionMs?: number;
  /**
   * How long a request may hold its claim without answering before another
   * request with the key may claim it (the first one's process died, or its
   * client and handler hung). Until then retries are answered 409. The late
   * first request can no longer store its response. Default 60 000 ms.
   * Claims made through a fence's transaction are invisible to others until
   * it commits, so they never hit this.
   */
  readonly maxRunningMs?: number;
}

const DAY_MS = 24 * 60 * 60 * 1000;
const DEFAULT_MAX_RUNNING_MS = 60_000;
const MAX_SCOPE_LENGTH = 1024;
const MAX_FINGERPRINT_LENGTH = 256;

// Claim the key: insert it, or take over a record past its retention or a
// claim that has run past maxRunningMs. Otherwise the row is left alone and
// nothing comes back. clock_timestamp(), not now(): inside a fence's
// transaction now() is when that transaction began.
const CLAIM = `INSERT INTO fencekeeper_idempotency_keys AS k (scope, key, fingerprint, state, claim, created_at, updated_at, expires_at)
VALUES ($1, $2, $3, 'running', $4::uuid, clock_timestamp(), clock_timestamp(), clock_timestamp() + $5::float8 * interval '1 millisecond')
ON CONFLICT (scope, key) DO UPDATE
   SET fingerprint = EXCLUDED.fingerprint, state = 'running', claim = EXCLUDED.claim, status = NULL, headers = NULL, body = NULL,
       created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at
 WHERE k.expires_at <= clock_timestamp()
    OR (k.state = 'running' AND k.updated_at <= clock_timestamp() - $6::float8 * interval '1 millisecond')
RETURNING k.claim::text AS claim`;

const READ = `SELECT fingerprint, state, status, headers::text AS headers, encode(body, 'base64') AS body
  FROM fencekeeper_idempotency_keys WHERE scope = $1 AND key = $2`;

const COMPLETE = `UPDATE fencekeeper_idempotency_keys
   SET state = 'completed', status = $4, headers = $5::jsonb, body = decode($6, 'base64'), updated_at = clock_timestamp()
 WHERE scope = $1 AND key = $2 AND claim = $3::uuid AND state = 'running'`;

const RELEASE = `DELETE FROM fencekeeper_idempotency_keys WHERE scope = $1 AND key = $2 AND claim = $3::uuid AND state = 'running'`;

const PURGE = `DELETE FROM fencekeeper_idempotency_keys WHERE expires_at <= clock_timestamp()`;

/**
 * An IdempotencyStore on PostgreSQL, shared by every replica of a service.
 *
 * With `options.transaction` (idempotency() passes `req.fencing.transaction`
 * when the route is behind fencing() with a PostgresFenceStore), every
 * statement runs in that transaction: the claim and the stored response
 * commit with the handler's writes, or roll back with them, so a replay never
 * answers a success whose writes were rolled back. That transaction must be
 * on this store's database. Otherwise each statement commits on its own.
 *
 * Expired records are replaced when their key comes again; `purge()`
 * deletes the rest (run it from a scheduled job).
 */
export class PostgresIdempotencyStore implements IdempotencyStore<unknown> {
  readonly #db: Queryable;
  readonly #retentionMs: number;
  readonly #maxRunningMs: number;

  constructor(db: Database, options?: PostgresIdempotencyStoreOptions) {
    checkDatabase(db, 'PostgresIdempotencyStore');
    const o = checkObject(options, 'PostgresIdempotencyStore: options');
    this.#db = db;
    this.#retentionMs = optionalInteger(o['retentionMs'], 'retentionMs', 1, Number.MAX_SAFE_INTEGER) ?? DAY_MS;
    this.#maxRunningMs = optionalInteger(o['maxRunningMs'], 'maxRunningMs', 1, Number.MAX_SAFE_INTEGER) ?? DEFAULT_MAX_RUNNING_MS;
  }

  async begin(key: IdempotencyScopeKey, fingerprint: string, options?: { readonly transaction?: unknown }): Promise<IdempotencyLookup> {
    const { scope, key: name } = checkKey(key);
    checkText(fingerprint, 'fingerprint', MAX_FINGERPRINT_LENGTH);
    const tx = this.#on(options);
    // A record can expire and be purged between the two statements: then claim again.
    for (let attempt = 0; attempt < 3; attempt += 1) {
      const id = randomUUID();
      const claimed = await run(tx, statement(CLAIM, [scope, name, fingerprint, id, String(this.#retentionMs), String(this.#maxRunningMs)]));
      if (claimed.rows.length > 0) return { state: 'claimed', claim: Object.freeze({ scope, key: name, fingerprint, id }) };
      const { rows } = await run(tx, statement(READ, [scope, name]));
      const row = rows[0];
      if (row === undefined) continue;
      const sameRequest = row['fingerprint'] === fingerprint;
      if (row['state'] !== 'completed') return { state: 'running', sameRequest };
      return { state: 'completed', sameRequest, response: responseOf(row) };
    }
    throw new Error(`PostgresIdempotencyStore: the key ${JSON.stringify(name)} kept vanishing between claim and read`);
  }

  async complete(claim: IdempotencyClaim, response: StoredResponse, options?: { readonly transaction?: unknown }): Promise<boolean> {
    const { scope, key, id } = checkClaim(claim);
    const { status, headers, body } = checkResponse(response);
    const values = [scope, key, id, status, JSON.stringify(headers), body === null ? null : Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('base64')];
    const { rowCount } = await run(this.#on(options), statement(COMPLETE, values));
    return rowCount > 0;
  }

  async release(claim: IdempotencyClaim, options?: { readonly transaction?: unknown }): Promise<void> {
    const { scope, key, id } = checkClaim(claim);
    await run(this.#on(options), statement(RELEASE, [scope, key, id]));
  }

  /** Delete every record past its retention; answers how many. */
  async purge(): Promise<number> {
    const { rowCount } = await run(this.#db, { text: PURGE, values: [], prepared: false });
    return rowCount;
  }

  /** The fence's transaction when one was handed over, else the database. */
  #on(options: { readonly transaction?: unknown } | undefined): Queryable {
    const transaction = options?.transaction;
    if (transaction === undefined || transaction === null) return this.#db;
    if (isKysely(transaction) || isPgQueryable(transaction)) return transaction;
    throw new InvalidArgumentError(`PostgresIdempotencyStore: options.transaction must be a pg client or a Kysely transaction, got ${describe(transaction)}`);
  }
}

function statement(text: string, values: unknown[]): Statement {
  return { text, values, prepared: true };
}

function checkKey(value: unknown): IdempotencyScopeKey {
  const o = checkObject(value, 'key ({ scope, key })');
  const scope = o['scope'];
  // The empty scope is the default (one namespace); checkText refuses only what PostgreSQL cannot hold.
  if (scope !== '') checkText(scope, 'scope', MAX_SCOPE_LENGTH);
  return { scope: scope as string, key: checkText(o['key'], 'key', MAX_SCOPE_LENGTH) };
}

function checkClaim(value: unknown): IdempotencyClaim {
  const { scope, key } = checkKey(value);
  const { id, fingerprint } = value as IdempotencyClaim;
  if (typeof id !== 'string' || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id)) {
    throw new InvalidArgumentError(`not a claim of this store: id ${describe(id)}`);
  }
  return { scope, key, id, fingerprint };
}

function checkResponse(value: unknown): StoredResponse {
  const o = checkObject(value, 'response');
  const status = optionalInteger(o['status'], 'status', 100, 599);
  if (status === undefined) throw new InvalidArgumentError('response.status is required');
  const headers = o['headers'];
  if (!Array.isArray(headers) || !headers.every((h) => Array.isArray(h) && h.length === 2 && typeof h[0] === 'string' && typeof h[1] === 'string')) {
    throw new InvalidArgumentError('response.headers must be an array of [name, value] string pairs');
  }
  const body = o['body'];
  if (body !== null && !(body instanceof Uint8Array)) throw new InvalidArgumentError(`response.body must be a Uint8Array or null, got ${describe(body)}`);
  return { status, headers: headers as [string, string][], body };
}

function responseOf(row: Record<string, unknown>): StoredResponse {
  const headers = JSON.parse(String(row['headers'])) as [string, string][];
  const body = row['body'] === null ? null : new Uint8Array(Buffer.from(String(row['body']), 'base64'));
  return Object.freeze({ status: Number(row['status']), headers: Object.freeze(headers.map((h) => Object.freeze([h[0], h[1]] as const))), body });
}
