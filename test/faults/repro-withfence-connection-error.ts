// Reproduction (run: DATABASE_URL=postgres://root@127.0.0.1:5432/test
//   node node_modules/vite-node/vite-node.mjs test/faults/repro-withfence-connection-error.ts):
// withFence() checks a client out of the pool and holds it for the whole
// transaction without listening for the client's 'error' event. pg-pool takes
// its own idle listener off a checked-out client, and pg's Client emits 'error'
// on every socket error or backend termination (with or without a query in
// flight), so a connection lost in the middle of withFence() is an unhandled
// 'error' event: the process crashes instead of withFence() rejecting. (Found
// by the fault run: a worker died with "Unhandled 'error' event ... ECONNRESET
// ... Client._handleErrorEvent" after its PostgreSQL connection was reset.)
// PostgresFenceStore holds a checked-out client for a whole HTTP request, so
// it likely has the same exposure.
// Exit 0 when withFence rejected and the process survived; the bug kills it (exit 7).
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { migrate, withFence } from '../../adapters/postgres/index.js';

process.on('exit', (code) => {
  if (code !== 0) console.log(`process exiting with ${code}: withFence let the client's 'error' event go unhandled`);
});
process.on('uncaughtException', (error) => {
  console.log(`BUG: uncaught exception: ${error.message}`);
  process.exit(7);
});

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const pool = new pg.Pool({ connectionString: url, max: 1 });
pool.on('error', () => undefined); // the application did its part: idle errors are handled
const admin = new pg.Pool({ connectionString: url, max: 1 });
await migrate(admin);
const resource = `repro/withfence-error/${process.pid}`;
try {
  await withFence(pool, resource, 5n, async (tx) => {
    const { rows } = await tx.query<{ pid: number }>('select pg_backend_pid() as pid');
    // The connection is lost mid-transaction (here: the server terminates the backend).
    await admin.query('select pg_terminate_backend($1)', [rows[0]?.pid]);
    await sleep(200);
    await tx.query('select 1');
  });
  console.log('withFence resolved (unexpected)');
} catch (error) {
  console.log(`ok: withFence rejected: ${(error as Error).message}`);
}
await admin.query('delete from fencekeeper_fences where resource = $1', [resource]);
await admin.end();
await pool.end();
