// fencekeeper/postgres: fencing enforced by PostgreSQL itself. Every entry
// point takes a pg.Pool or a Kysely instance over pg (structural interfaces:
// neither library is imported here); the row helpers also take a pg client or
// a Kysely transaction, so they compose with withFence() and the store.
export { migrate, loadMigrations, migrationsDirectory } from './migrate.js';
export type { MigrateOptions, MigrateResult, Migration } from './migrate.js';
export { withFence } from './with-fence.js';
export { fencedUpdate, fencedInsert, fencedUpsert, fencedDelete } from './rows.js';
export type { FencedUpdateOptions, FencedInsertOptions, FencedUpsertOptions, FencedDeleteOptions } from './rows.js';
export { fenced } from './kysely.js';
export type { FenceableUpdate } from './kysely.js';
export { PostgresFenceStore } from './store.js';
export type {
  Database,
  TransactionOf,
  PoolClientOf,
  Queryable,
  PgPool,
  PgPoolClient,
  PgQueryable,
  PgQueryConfig,
  PgQueryResult,
  KyselyDatabase,
  KyselyExecutor,
  KyselyCompiledQuery,
} from './database.js';
