// Compile-time checks that users' real pg and Kysely objects fit the adapter's
// structural interfaces, with the transaction types inferred (vitest's
// expectTypeOf is checked by tsc; the runtime part only builds objects).
import { describe, expectTypeOf, it } from 'vitest';
import pg from 'pg';
import { Kysely, PostgresDialect, type Transaction, type UpdateQueryBuilder, type UpdateResult } from 'kysely';
import {
  PostgresFenceStore,
  fenced,
  fencedUpdate,
  migrate,
  withFence,
  type Database,
  type KyselyExecutor,
  type PgPoolClient,
  type TransactionOf,
} from '../../adapters/postgres/index.js';
import type { FenceAdmission } from '../../src/index.js';

interface DB {
  docs: { id: number; body: string; fencing_token: string };
}

describe('fencekeeper/postgres types', () => {
  it('a pg.Pool and a Kysely<DB> fit every entry point, with transaction types inferred', () => {
    const pool = new pg.Pool({ max: 1 });
    const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
    if (Math.random() < 2) return; // types only: nothing below runs

    expectTypeOf(withFence(pool, 'r', 1n, async (client) => {
      expectTypeOf(client).toEqualTypeOf<pg.PoolClient>();
      return 1;
    })).toEqualTypeOf<Promise<number>>();
    expectTypeOf(withFence(db, 'r', 1n, async (trx) => {
      expectTypeOf(trx).toEqualTypeOf<Transaction<DB>>();
      return fencedUpdate(trx, { table: 'docs', where: { id: 1 }, set: { body: 'x' }, token: 1n });
    })).toEqualTypeOf<Promise<number>>();
    void migrate(pool);
    void migrate(db);

    const pgStore = new PostgresFenceStore(pool);
    expectTypeOf(pgStore.admit('r', 1n)).toEqualTypeOf<Promise<FenceAdmission<pg.PoolClient>>>();
    const kyselyStore = new PostgresFenceStore(db);
    expectTypeOf(kyselyStore.admit('r', 1n)).toEqualTypeOf<Promise<FenceAdmission<Transaction<DB>>>>();
    const either: Database = Math.random() < 0.5 ? pool : db;
    const anyStore = new PostgresFenceStore(either);
    expectTypeOf(anyStore.admit('r', 1n)).toEqualTypeOf<Promise<FenceAdmission<TransactionOf<Database>>>>();
    expectTypeOf<TransactionOf<Database>>().toEqualTypeOf<KyselyExecutor | PgPoolClient>();

    const builder = db.updateTable('docs').set({ body: 'x' }).where('id', '=', 1);
    expectTypeOf(fenced(builder, 1n)).toEqualTypeOf<UpdateQueryBuilder<DB, 'docs', 'docs', UpdateResult>>();
  });
});
