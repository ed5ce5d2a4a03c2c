// Shared by the fencekeeper/mysql suites: pools on the run's MariaDB
// (FK_MYSQL), and a private database per file so files never see each
// other's tables or fences.
import mysql from 'mysql2/promise';
import { migrate } from '../../../adapters/mysql/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';

export type Pool = mysql.Pool;

/** A pool on `database` (default: the URL's). */
export function mysqlPool(database?: string, connectionLimit = 25): Pool {
  const url = new URL(testServers().mysql);
  if (database !== undefined) url.pathname = `/${database}`;
  return mysql.createPool({ uri: url.toString(), connectionLimit, waitForConnections: true });
}

/** A fresh database (migrated unless told not to) and a pool on it; `drop()` removes both. */
export async function privateDatabase(prefix: string, options: { migrated?: boolean; connectionLimit?: number } = {}): Promise<{ name: string; pool: Pool; drop(): Promise<void> }> {
  const name = uniqueId(prefix);
  const admin = mysqlPool(undefined, 1);
  await admin.query(`CREATE DATABASE \`${name}\``);
  await admin.end();
  const pool = mysqlPool(name, options.connectionLimit);
  if (options.migrated !== false) await migrate(pool);
  return {
    name,
    pool,
    async drop() {
      await pool.end();
      const again = mysqlPool(undefined, 1);
      await again.query(`DROP DATABASE IF EXISTS \`${name}\``);
      await again.end();
    },
  };
}

/** The fence row's mark as text (null: none). */
export async function markOf(pool: Pool, resource: string): Promise<bigint | null> {
  const [rows] = await pool.query('SELECT CAST(token AS CHAR) AS token FROM fencekeeper_fences WHERE resource = ?', [resource]);
  const row = (rows as { token: string }[])[0];
  return row === undefined ? null : BigInt(row.token);
}

/** `count` distinct random tokens in 1..2^40. */
export function randomTokens(count: number): bigint[] {
  const seen = new Set<bigint>();
  while (seen.size < count) seen.add(BigInt(1 + Math.floor(Math.random() * 2 ** 40)));
  return [...seen];
}
