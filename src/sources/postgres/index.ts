// The PostgreSQL token source, re-exported by fencekeeper/postgres (the
// family's one entry, adapters/postgres/index.ts): a fair lock whose tokens
// and leases live in the database the application already runs.
export { postgresSource } from './source.js';
export type { PostgresSource, PostgresLeaderObserver, PostgresLeaderInfo } from './source.js';
export type { PostgresPermit } from './permit.js';
export type { PostgresLock } from './lock.js';
export type { PostgresLeadership } from './election.js';
export type { PostgresQueueEntry, PostgresLockStatus, PostgresKindStatus, PostgresRwQueueEntry, PostgresPermitEntry } from './queue.js';
export type { PostgresSourceOptions } from './input.js';
export type { PostgresSourceStats } from './session.js';
export type { PgSourcePool, PgSourceClient, PgSourceQuery, PgSourceResult, PgNotification } from './client.js';
export { withLease } from './with-lease.js';
export type { LeasePool, LeaseClientOf, LeaseKysely, LeaseKyselyExecutor } from './with-lease.js';
