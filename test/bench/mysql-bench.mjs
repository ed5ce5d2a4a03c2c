// Benchmark: what fencing costs in MySQL/MariaDB. One run, one server, one
// connection count for every mode:
//   plain         UPDATE t SET body = ?, fencing_token = ? WHERE id = ?   (pool.query)
//   fencedUpdate  the same update through fencedUpdate() (the token condition and the
//                 binding check in the statement's WHERE; one round trip)
//   tx            getConnection; START TRANSACTION; the plain UPDATE; COMMIT
//   withFence     withFence(pool, row's resource, token, the plain UPDATE): START
//                 TRANSACTION, the fence row's locking read, SAVEPOINT, the UPDATE,
//                 RELEASE SAVEPOINT, COMMIT (three round trips more than tx)
//
//   npm run build && node test/bench/mysql-bench.mjs
//
// FK_MYSQL (default mysql://root@127.0.0.1:3306/test), BENCH_CONNECTIONS (pool
// size = concurrent workers, default 8), BENCH_SECONDS (per block, default 2),
// BENCH_ROUNDS (default 5), BENCH_ROWS (default 1000). Each worker updates
// random rows by primary key (withFence: the resource is the row, so holders
// rarely contend); the token stays the same (the same holder writing many
// times, the common case). The two pairs take turns in alternating blocks
// (fenced, plain, plain, fenced, ...), so load from elsewhere on the machine
// falls on both alike; each pair's median over rounds of operations per
// second and the median of the per-round ratios are printed. No test asserts
// on these figures.
import mysql from 'mysql2/promise';
import { fencedUpdate, migrate, withFence } from 'fencekeeper/mysql';

const url = process.env.FK_MYSQL ?? 'mysql://root@127.0.0.1:3306/test';
const connections = Number(process.env.BENCH_CONNECTIONS ?? 8);
const seconds = Number(process.env.BENCH_SECONDS ?? 2);
const rounds = Number(process.env.BENCH_ROUNDS ?? 5);
const rowCount = Number(process.env.BENCH_ROWS ?? 1000);
const table = `fk_bench_${process.pid}`;
const token = 1_000_000_007n;

const pool = mysql.createPool({ uri: url, connectionLimit: connections });
await migrate(pool);
await pool.query(`CREATE TABLE \`${table}\` (id INT PRIMARY KEY, body VARCHAR(64) NOT NULL, fencing_token BIGINT NULL) ENGINE=InnoDB`);
const values = Array.from({ length: rowCount }, (_, i) => `(${i}, 'x', NULL)`).join(', ');
await pool.query(`INSERT INTO \`${table}\` VALUES ${values}`);

const row = () => Math.floor(Math.random() * rowCount);
const update = `UPDATE \`${table}\` SET body = ?, fencing_token = ? WHERE id = ?`;
const modes = {
  plain: () => pool.query(update, [`b${Math.random()}`, String(token), row()]),
  fencedUpdate: () => fencedUpdate(pool, { table, where: { id: row() }, set: { body: `b${Math.random()}` }, token }),
  tx: async () => {
    const c = await pool.getConnection();
    try {
      await c.query('START TRANSACTION');
      await c.query(update, [`b${Math.random()}`, String(token), row()]);
      await c.query('COMMIT');
    } finally {
      c.release();
    }
  },
  withFence: () => {
    const id = row();
    return withFence(pool, `bench/${table}/${id}`, token, (c) => c.query(update, [`b${Math.random()}`, String(token), id]));
  },
};

/** Operations per second of `op` run by `connections` workers for `seconds`. */
async function block(op) {
  let done = 0;
  const end = performance.now() + seconds * 1000;
  const start = performance.now();
  await Promise.all(Array.from({ length: connections }, async () => {
    while (performance.now() < end) {
      await op();
      done += 1;
    }
  }));
  return done / ((performance.now() - start) / 1000);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Warm up every mode (the fence rows' first marks, the pool's connections).
for (const op of Object.values(modes)) await block(op);

const pairs = [['fencedUpdate', 'plain'], ['withFence', 'tx']];
const results = Object.fromEntries(Object.keys(modes).map((m) => [m, []]));
const ratios = Object.fromEntries(pairs.map(([a]) => [a, []]));
for (let r = 0; r < rounds; r++) {
  for (const [fenced, plain] of pairs) {
    // Alternate which goes first, so a trend over the run does not favour one.
    const order = r % 2 === 0 ? [fenced, plain] : [plain, fenced];
    const got = {};
    for (const mode of order) got[mode] = await block(modes[mode]);
    results[fenced].push(got[fenced]);
    results[plain].push(got[plain]);
    ratios[fenced].push(got[fenced] / got[plain]);
  }
}

const [version] = await pool.query('SELECT VERSION() AS v');
console.log(`server ${version[0].v}, ${connections} connections, ${rounds} rounds of ${seconds}s blocks, ${rowCount} rows`);
for (const [fenced, plain] of pairs) {
  console.log(`${fenced.padEnd(13)} ${median(results[fenced]).toFixed(0).padStart(7)} ops/s   ${plain.padEnd(6)} ${median(results[plain]).toFixed(0).padStart(7)} ops/s   ratio ${median(ratios[fenced]).toFixed(2)}x (per round: ${ratios[fenced].map((x) => x.toFixed(2)).join(' ')})`);
}
await pool.query(`DROP TABLE \`${table}\``);
await pool.query('DELETE FROM fencekeeper_fences WHERE resource LIKE ?', [`bench/${table}/%`]);
await pool.end();
