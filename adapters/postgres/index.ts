/**
 * Fencing enforced by PostgreSQL over a pg.Pool or Kysely: withFence, the
 * fenced row helpers, PostgresFenceStore, bindings, withEffect and its ledger,
 * PostgresIdempotencyStore, migrate. Guide: docs/postgres.md in the package.
 *
 * @module fencekeeper/postgres
 */
// fencekeeper/postgres: fencing enforced by PostgreSQL itself. Every entry
// point takes a pg.Pool or a Kysely instance over pg (structural interfaces:
// neither library is imported here); the row helpers also take a pg client or
// a Kysely transaction, so they compose with withFence() and the store.
// Exported types are the ones a caller writes down: options and results, the
// database and transaction shapes of code generic over both flavors, and the
// message published on fencekeeper:postgres:commit-failed.
//
// PostgreSQL plays both roles: a fenced resource (this folder) and a token
// source (src/sources/postgres/, postgresSource: re-exported here, its public
// face only; test/unit/layers.test.ts allows exactly this re-export).
export * from '../../src/sources/postgres/index.js';
export { migrate, loadMigrations, migrationsDirectory } from './migrate.js';
export type { MigrateOptions, MigrateResult, Migration } from './migrate.js';
export { withFence } from './fence/with-fence.js';
export { fencedUpdate, fencedInsert, fencedUpsert, fencedDelete } from './rows/fenced-rows.js';
export type { FencedUpdateOptions, FencedInsertOptions, FencedUpsertOptions, FencedDeleteOptions } from './rows/fenced-rows.js';
export { fenced } from './rows/kysely.js';
export { PostgresFenceStore } from './fence/store.js';
export { bindFence, fenceBindingOf } from './fence/bind.js';
export { bindTable, tableBindingOf } from './rows/bind-table.js';
export type { CommitFailure } from './fence/transaction.js';
export type { Database, Queryable, TransactionOf, PgPool, PgPoolClient, PgQueryable, PgQueryConfig, PgQueryResult, PoolClientOf, KyselyDatabase, KyselyExecutor, KyselyCompiledQuery } from './database.js';
export type { FenceableUpdate } from './rows/kysely.js';
export { withEffect } from './effects/with-effect.js';
export type { EffectTarget, EffectContext, EffectOptions, EffectResult, Effect, Reconciled, ReconcileContext } from './effects/with-effect.js';
export { DefiniteFailure } from './effects/outcome.js';
export { pendingEffects, listEffects } from './effects/list.js';
export { settlePendingEffect } from './effects/settle.js';
export type { ExternalOutcome } from './effects/settle.js';
export type { PendingEffectsOptions, ListEffectsOptions } from './effects/list.js';
export type { RecordedEffect, RecordedFailure, EffectState } from './effects/ledger.js';
export { effectIdempotencyKey } from './effects/input.js';
export { PostgresIdempotencyStore } from './idempotency/store.js';
export type { PostgresIdempotencyStoreOptions } from './idempotency/store.js';
