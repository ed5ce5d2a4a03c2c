// Benchmark: the client-side CPU of withFence alone (issue #35), with no
// server and no socket: a pg.Pool look-alike whose clients answer every
// message at once with the results PostgreSQL would send (the probe's row,
// the command tags), so what is left is fencekeeper's code (and Kysely's) per
// operation. Each line beside the same transaction without the fence on the
// same look-alike:
//   pg.tx      BEGIN; UPDATE; COMMIT on a pg client
//   pg.bound   withFence's messages on its common path, sent by hand
//   pg.fence   withFence(pg.Pool)
//   ky.tx      db.transaction() with the UPDATE through Kysely
//   ky.fence   withFence(Kysely)
// A figure of this machine's CPU at the time (shared, loaded): read the
// differences between lines of one run, never one line alone.
//
//   npm run build && node test/bench/pg-client-cpu.mjs
//
// N (operations per block, default 20000), R (rounds, default 5), DIST (another build).
import { loadavg } from 'node:os';
import { Kysely, PostgresDialect, sql } from 'kysely';

const dist = process.env.DIST ?? new URL('../../dist', import.meta.url).pathname;
const { withFence } = await import(`${dist}/adapters/postgres/index.js`);
const N = Number(process.env.N ?? 20000);
const ROUNDS = Number(process.env.R ?? 5);
const TOKEN = 34n;

const tag = (command, rows = [], rowCount = rows.length) => ({ command, rows, rowCount, fields: [] });
/** What PostgreSQL answers each statement of a simple-query message with (the common path only). */
function answer(text) {
  const statements = text.split(/;\s(?=[A-Z])/);
  const results = statements.map((statement) => {
    if (statement.startsWith('EXECUTE fencekeeper_fences_equal') || statement.startsWith('EXECUTE lat_equal')) return tag('SELECT', [{ locked: 1 }]);
    if (statement.startsWith('SELECT pg_backend_pid()')) return tag('SELECT', [{ pid: 1 }]);
    return tag(statement.split(' ')[0].toUpperCase());
  });
  return results.length === 1 ? results[0] : results;
}

/** A pg.Pool look-alike: one client, handed out again and again, answering at once. */
function fakePool() {
  const client = {
    query(config, values) {
      const text = typeof config === 'string' ? config : config.text;
      if (values !== undefined && values.length > 0) return Promise.resolve(tag(text.split(' ')[0].toUpperCase(), [], 1));
      if (typeof config === 'object' && config.values !== undefined) return Promise.resolve(tag('UPDATE', [], 1));
      return Promise.resolve(answer(text));
    },
    release() {},
    on() {},
    removeListener() {},
    processID: 1,
  };
  return {
    connect: () => Promise.resolve(client),
    query: (config) => client.query(config),
    end: () => Promise.resolve(),
    on() {},
  };
}

const UPDATE = { name: 'u', text: 'UPDATE docs SET body = $1 WHERE id = $2' };
const pgPool = fakePool();
const kyTx = new Kysely({ dialect: new PostgresDialect({ pool: fakePool() }) });
const kyFence = new Kysely({ dialect: new PostgresDialect({ pool: fakePool() }) });
const update = (trx) => sql`UPDATE docs SET body = ${'x'} WHERE id = ${1}`.execute(trx);

const modes = {
  'pg.tx': async () => {
    const client = await pgPool.connect();
    try {
      await client.query('BEGIN');
      await client.query({ ...UPDATE, values: ['x', 1] });
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  },
  'pg.bound': async () => {
    const client = await pgPool.connect();
    try {
      const probed = await client.query(`BEGIN; EXECUTE lat_equal(E'docs:1', ${TOKEN}::int8, NULL::text, NULL::text, NULL::text, NULL::text); SAVEPOINT fencekeeper_fenced`);
      if (probed[1]?.rowCount !== 1) throw new Error('no probe row');
      await client.query({ ...UPDATE, values: ['x', 1] });
      await client.query('SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT');
    } finally {
      client.release();
    }
  },
  'pg.fence': () => withFence(pgPool, 'docs:1', TOKEN, (client) => client.query({ ...UPDATE, values: ['x', 1] })),
  'ky.tx': () => kyTx.transaction().execute(update),
  'ky.fence': () => withFence(kyFence, 'docs:2', TOKEN, update),
};

// The first of each fenced side is the upsert (no guess yet); warm up past it and the JIT.
for (const op of Object.values(modes)) for (let i = 0; i < 2000; i += 1) await op();
const names = Object.keys(modes);
const perRound = Object.fromEntries(names.map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round += 1) {
  for (let k = 0; k < names.length; k += 1) {
    const name = names[(round + k) % names.length];
    const op = modes[name];
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < N; i += 1) await op();
    const cpu = process.cpuUsage(cpu0);
    perRound[name].push((cpu.user + cpu.system) / N);
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`client CPU per operation, no server (${ROUNDS} rounds x ${N}); load ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
for (const name of names) console.log(`${name.padEnd(9)} ${median(perRound[name]).toFixed(2).padStart(7)} us   (rounds ${perRound[name].map((x) => x.toFixed(1)).join(' ')})`);
console.log(`  withFence - bound (pg): ${(median(perRound['pg.fence']) - median(perRound['pg.bound'])).toFixed(2)} us; withFence - db.transaction() (Kysely): ${(median(perRound['ky.fence']) - median(perRound['ky.tx'])).toFixed(2)} us`);
