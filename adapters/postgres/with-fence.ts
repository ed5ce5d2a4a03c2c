import { guardClient, isKysely, type KyselyDatabase, type KyselyExecutor, type PgPool, type PgPoolClient, type Database, type PoolClientOf } from './database.js';
import { advanceFence } from './fence-row.js';
import { checkResource, checkToken } from './identifiers.js';
import type { FencingToken } from '../../src/index.js';
import { InvalidArgumentError } from '../../src/index.js';

/**
 * Run `work` in one transaction that first advances the fence of `resource` to
 * `token` and holds that row's lock until commit:
 * - a token equal to the mark passes (the same holder writes many times),
 *   a larger one advances it, a smaller one throws StaleTokenError (carrying
 *   the current mark) before `work` runs;
 * - concurrent calls for one resource are serialized by the row lock, so a
 *   stale holder's writes in `work` can never commit after a newer holder's:
 *   either it advanced first (and the newer one waits for it), or it finds the
 *   larger mark and is refused;
 * - if `work` throws, everything rolls back (the fence advance included).
 *
 * `work` receives the transaction: a pg client inside BEGIN for a pg.Pool, or
 * the Kysely Transaction for a Kysely instance. Write through it, not through
 * the pool: a write on another connection is outside the fence.
 */
export function withFence<P extends PgPool, T>(db: P, resource: string, token: FencingToken, work: (client: PoolClientOf<P>) => Promise<T>): Promise<T>;
export function withFence<Trx extends KyselyExecutor, T>(db: KyselyDatabase<Trx>, resource: string, token: FencingToken, work: (trx: Trx) => Promise<T>): Promise<T>;
/** For code generic over both flavors: `work` gets whichever the database hands out. */
export function withFence<T>(db: Database, resource: string, token: FencingToken, work: (trx: PgPoolClient | KyselyExecutor) => Promise<T>): Promise<T>;
export async function withFence<T>(db: Database, resource: string, token: FencingToken, work: (trx: never) => Promise<T>): Promise<T> {
  checkResource(resource);
  checkToken(token);
  if (typeof work !== 'function') throw new InvalidArgumentError('work must be a function');
  const run = work as (trx: unknown) => Promise<T>;
  if (isKysely(db)) {
    return (db as KyselyDatabase).transaction().execute(async (trx) => {
      await advanceFence(trx, resource, token);
      return run(trx);
    });
  }
  const client = await (db as PgPool).connect();
  const release = guardClient(client);
  let broken: Error | undefined;
  try {
    try {
      await client.query({ text: 'BEGIN' });
    } catch (error) {
      broken = error instanceof Error ? error : new Error(String(error));
      throw error;
    }
    try {
      await advanceFence(client, resource, token);
      const result = await run(client);
      await client.query({ text: 'COMMIT' });
      return result;
    } catch (error) {
      try {
        await client.query({ text: 'ROLLBACK' });
      } catch (rollbackError) {
        // The connection is unusable (it dropped mid-transaction): destroy it
        // instead of returning it to the pool.
        broken = rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
      }
      throw error;
    }
  } finally {
    release(broken);
  }
}
