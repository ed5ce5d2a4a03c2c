/**
 * Fencing enforced by MySQL or MariaDB (InnoDB) over a mysql2 promise pool:
 * withFence, the fenced row helpers, MySqlFenceStore, bindings, migrate.
 * Guide: docs/mysql.md in the package.
 *
 * @module fencekeeper/mysql
 */
// fencekeeper/mysql: fencing enforced by MySQL or MariaDB (InnoDB) itself.
// Every entry point takes a mysql2 promise Pool (structural interfaces:
// mysql2 is not imported here); the row helpers also take the PoolConnection
// withFence() and the store hand out, so they compose with both.
export { migrate, loadMigrations, migrationsDirectory } from './migrate.js';
export type { MigrateOptions, MigrateResult, Migration } from './migrate.js';
export { withFence } from './with-fence.js';
export { fencedUpdate, fencedInsert, fencedUpsert, fencedDelete } from './rows.js';
export type { FencedUpdateOptions, FencedInsertOptions, FencedUpsertOptions, FencedDeleteOptions } from './rows.js';
export { MySqlFenceStore } from './store.js';
export { bindFence, fenceBindingOf, bindTable, tableBindingOf } from './bind.js';
export type { MySqlPool, MySqlPoolConnection, MySqlQueryable, MySqlResultHeader } from './database.js';
