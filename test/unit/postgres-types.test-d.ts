// Type tests: users' real pg and Kysely objects fit the adapter's structural
// interfaces, with the transaction types inferred. Nothing here runs: vitest's
// typecheck (on in vitest.config.ts, so `npm test` includes it) hands this
// file to tsc and reports every failed expectTypeOf as a failed test.
import { describe, expectTypeOf, it } from 'vitest';
import pg from 'pg';
import { Kysely, PostgresDialect, type Transaction, type UpdateQueryBuilder, type UpdateResult } from 'kysely';
import {
  PostgresFenceStore,
  bindTable,
  fenced,
  fencedDelete,
  fencedInsert,
  fencedUpdate,
  fencedUpsert,
  tableBindingOf,
  migrate,
  withFence,
  type Database,
  type KyselyExecutor,
  type PgPoolClient,
  type TransactionOf,
} from '../../adapters/postgres/index.js';
import { CURRENT_LOCK, type FenceAdmission, type FenceBinding, type Fencing } from '../../src/index.js';

interface DB {
  docs: { id: number; body: string; fencing_token: string };
}

declare const pool: pg.Pool;
declare const db: Kysely<DB>;
declare const either: Database;

describe('fencekeeper/postgres types', () => {
  it('a pg.Pool and a Kysely<DB> over one are each a Database', () => {
    expectTypeOf(pool).toExtend<Database>();
    expectTypeOf(new Kysely<DB>({ dialect: new PostgresDialect({ pool }) })).toExtend<Database>();
  });

  it('withFence hands a pg.Pool\'s work a pg.PoolClient, a Kysely\'s a Transaction<DB>, and returns what the work returns', () => {
    expectTypeOf(withFence(pool, 'r', 1n, async (client) => {
      expectTypeOf(client).toEqualTypeOf<pg.PoolClient>();
      return 1;
    })).toEqualTypeOf<Promise<number>>();
    expectTypeOf(withFence(db, 'r', 1n, async (trx) => {
      expectTypeOf(trx).toEqualTypeOf<Transaction<DB>>();
      return fencedUpdate(trx, { table: 'docs', where: { id: 1 }, set: { body: 'x' }, token: 1n });
    })).toEqualTypeOf<Promise<number>>();
  });

  it('migrate accepts both flavors', () => {
    expectTypeOf(migrate).toBeCallableWith(pool);
    expectTypeOf(migrate).toBeCallableWith(db);
  });

  it('PostgresFenceStore admits with the flavor\'s transaction type', () => {
    expectTypeOf(new PostgresFenceStore(pool).admit('r', 1n)).toEqualTypeOf<Promise<FenceAdmission<pg.PoolClient>>>();
    expectTypeOf(new PostgresFenceStore(db).admit('r', 1n)).toEqualTypeOf<Promise<FenceAdmission<Transaction<DB>>>>();
    expectTypeOf(new PostgresFenceStore(either).admit('r', 1n)).toEqualTypeOf<Promise<FenceAdmission<TransactionOf<Database>>>>();
    expectTypeOf<TransactionOf<Database>>().toEqualTypeOf<KyselyExecutor | PgPoolClient>();
  });

  it('fenced() keeps the Kysely update builder\'s type', () => {
    const builder = db.updateTable('docs').set({ body: 'x' }).where('id', '=', 1);
    expectTypeOf(fenced(builder, 1n)).toEqualTypeOf<UpdateQueryBuilder<DB, 'docs', 'docs', UpdateResult>>();
    expectTypeOf(fenced(builder, CURRENT_LOCK)).toEqualTypeOf<UpdateQueryBuilder<DB, 'docs', 'docs', UpdateResult>>();
  });

  it('the row helpers and bindTable take what a bound table needs: a Sequencer, CURRENT_LOCK, a FenceBinding', () => {
    expectTypeOf(fencedUpdate).parameter(1).toHaveProperty('token').toEqualTypeOf<Fencing>();
    expectTypeOf(fencedUpsert).parameter(1).toHaveProperty('token').toEqualTypeOf<Fencing>();
    expectTypeOf(fencedInsert).parameter(1).toHaveProperty('token').toEqualTypeOf<Fencing>();
    expectTypeOf(fencedDelete).parameter(1).toHaveProperty('token').toEqualTypeOf<Fencing>();
    expectTypeOf(bindTable).parameters.toEqualTypeOf<[Database, string, FenceBinding]>();
    expectTypeOf(bindTable).returns.toEqualTypeOf<Promise<FenceBinding>>();
    expectTypeOf(tableBindingOf).returns.toEqualTypeOf<Promise<FenceBinding | null>>();
    // @ts-expect-error a token is a bigint, a Sequencer or CURRENT_LOCK, not a number
    void fencedUpdate(pool, { table: 'docs', where: { id: 1 }, set: { body: 'x' }, token: 1 });
  });
});
