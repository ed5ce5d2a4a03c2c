// postgresSource's cost against its floors, one run (not in the suite):
//   source      acquireLock + release of postgresSource, one loop, uncontended
//   floor       the same two statements (fencekeeper_lock_enter, _leave) sent
//               by a bare pg client on one connection: what the source adds
//               on top is its own JavaScript
//   pool floor  the same two statements sent through pool.query of a pg.Pool
//               (as the source sends them): what pg.Pool's per-query
//               checkout, release and idle timer add to the floor
//   advisory    pg_advisory_lock + pg_advisory_unlock on one connection: the
//               cheapest lock PostgreSQL has (no token, no queue, no lease)
//   baseline    (with FK_BASELINE) the source of another build, as `source`
// each in rotating blocks (median of the rounds), with this process's CPU
// per cycle (process.cpuUsage, user + system: the client's own cost; on a
// machine where PostgreSQL shares the cores, the source's extra CPU per cycle
// is what its ratio to the floor can lose), and the hand-over latency
// (release called -> next holder granted) with 16 contenders on one lock.
// Then the lock kinds (migration 013) beside the plain lock, on the same
// source in the same rotating blocks, uncontended: acquireReadLock,
// acquireWriteLock and acquirePermit (4 permits) + release, each with its
// round trips per cycle counted on the source's pool (the heartbeat's
// connection is the source's own, not counted: a cost per lease, not per cycle).
//   node node_modules/vite-node/vite-node.mjs test/bench/postgres-source.ts
//   bash test/bench/plain.sh postgres-source   (the built package under plain Node, as a baseline's dist runs)
// env: DATABASE_URL (default postgres://root@127.0.0.1:5432/test), FK_BLOCK_MS (2000), FK_ROUNDS (3),
//   FK_CYCLE_ONLY=1 (the cycle figures only: no kinds, no hand-over),
//   FK_BASELINE: the root of another build of the package (a checkout with dist/, e.g. the
//   commit before a change, built in a worktree): its postgresSource joins the rotating blocks
//   as `baseline`, and the run prints source/baseline per round, then both medians with their
//   interquartile ranges (a regression: the source's median below the baseline's by more than their IQR).
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { migrate, postgresSource, type PostgresSource } from '../../adapters/postgres/index.js';
import { closedLoop, median } from './closed-loop.js';

const URL_ = process.env['DATABASE_URL'] ?? 'postgres://root@127.0.0.1:5432/test';
const BLOCK_MS = Number(process.env['FK_BLOCK_MS'] ?? 2000);
const ROUNDS = Number(process.env['FK_ROUNDS'] ?? 3);
const CYCLE_ONLY = process.env['FK_CYCLE_ONLY'] === '1';
const BASELINE = process.env['FK_BASELINE'];
/** The baseline's postgresSource (fencekeeper/postgres as that build has it). */
const baselineSource =
  BASELINE === undefined
    ? undefined
    : ((await import(`${BASELINE.replace(/\/$/, '')}/dist/adapters/postgres/index.js`)) as { postgresSource: (pool: pg.Pool, options: { leaseMs: number }) => PostgresSource }).postgresSource;
const load = (): string => loadavg().map((l) => l.toFixed(2)).join(' ');
const iqr = (xs: readonly number[]): [number, number] => {
  const s = [...xs].sort((a, b) => a - b);
  return [s[Math.floor(s.length / 4)]!, s[Math.min(s.length - 1, Math.floor((3 * s.length) / 4))]!];
};
const schema = `pgsrc_bench_${randomBytes(4).toString('hex')}`;
const root = new pg.Pool({ connectionString: URL_, max: 2 });
const pools: pg.Pool[] = [];
const pool = (max: number): pg.Pool => {
  const p = new pg.Pool({ connectionString: URL_, max, options: `-c search_path=${schema}` });
  pools.push(p);
  return p;
};

await root.query(`CREATE SCHEMA ${schema}`);
const sources: PostgresSource[] = [];
try {
  await migrate(pool(1));
  const source = postgresSource(pool(3), { leaseMs: 30_000 });
  sources.push(source);

  // The floor: a session of its own, the same statements on one connection.
  const bare = await pool(1).connect();
  const { rows } = await bare.query<{ id: string }>(`SELECT session_id::text AS id FROM fencekeeper_lock_session_open($1, 'bench', 600000)`, [`fencekeeper_bench_${randomBytes(6).toString('hex')}`]);
  const session = rows[0]!.id;
  const ENTER = `SELECT status, entry_id::text AS entry_id, token::text AS token, head, holder_ms::text AS holder_ms, reaped FROM fencekeeper_lock_enter($1, $2, $3, $4, $5, $6)`;
  const LEAVE = `SELECT fencekeeper_lock_leave($1, $2, $3)::text AS granted`;
  const advisory = await pool(1).connect();
  const pooled = pool(3);
  const pooledSession = (
    await pooled.query<{ id: string }>(`SELECT session_id::text AS id FROM fencekeeper_lock_session_open($1, 'bench', 600000)`, [`fencekeeper_bench_${randomBytes(6).toString('hex')}`])
  ).rows[0]!.id;

  const variants: Record<string, () => Promise<void>> = {
    source: async () => {
      const lock = await source.acquireLock('bench/source');
      await lock.release();
    },
    floor: async () => {
      const key = randomBytes(12).toString('base64url');
      const entered = await bare.query<{ entry_id: string }>({ name: 'bench_enter', text: ENTER, values: [session, 'lock', 'bench/floor', 'bench', true, key] });
      await bare.query({ name: 'bench_leave', text: LEAVE, values: [session, entered.rows[0]!.entry_id, key] });
    },
    'pool floor': async () => {
      const key = randomBytes(12).toString('base64url');
      const entered = await pooled.query<{ entry_id: string }>({ name: 'bench_enter', text: ENTER, values: [pooledSession, 'lock', 'bench/pooled', 'bench', true, key] });
      await pooled.query({ name: 'bench_leave', text: LEAVE, values: [pooledSession, entered.rows[0]!.entry_id, key] });
    },
    advisory: async () => {
      await advisory.query({ name: 'bench_adv_lock', text: 'SELECT pg_advisory_lock(4242)' });
      await advisory.query({ name: 'bench_adv_unlock', text: 'SELECT pg_advisory_unlock(4242)' });
    },
  };
  if (baselineSource !== undefined) {
    const base = baselineSource(pool(3), { leaseMs: 30_000 });
    sources.push(base);
    variants['baseline'] = async () => {
      const lock = await base.acquireLock('bench/baseline');
      await lock.release();
    };
  }
  const rates: Record<string, number[]> = {};
  const cpus: Record<string, number[]> = {};
  for (const name of Object.keys(variants)) {
    rates[name] = [];
    cpus[name] = [];
  }
  console.log(`load average before ${load()}`);
  for (const name of Object.keys(variants)) await closedLoop(1, 300, variants[name]!); // warm-up
  const vsBaseline: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const order = Object.keys(variants);
    for (let i = 0; i < round % order.length; i++) order.push(order.shift()!);
    for (const name of order) {
      const figures = await closedLoop(1, BLOCK_MS, variants[name]!);
      rates[name]!.push(figures.rate);
      cpus[name]!.push(figures.cpuUs);
    }
    const line = Object.keys(variants)
      .map((name) => `${name} ${rates[name]!.at(-1)!.toFixed(0)}/s ${cpus[name]!.at(-1)!.toFixed(0)} µs`)
      .join(', ');
    if (baselineSource !== undefined) vsBaseline.push(rates['source']!.at(-1)! / rates['baseline']!.at(-1)!);
    console.log(`  round ${round + 1}: ${line}; source/floor ${(rates['source']!.at(-1)! / rates['floor']!.at(-1)!).toFixed(2)}x${baselineSource === undefined ? '' : `, source/baseline ${vsBaseline.at(-1)!.toFixed(3)}x`}; load ${load()}`);
  }
  const m = (name: string): number => median(rates[name]!);
  const c = (name: string): number => median(cpus[name]!);
  const [sq1, sq3] = iqr(rates['source']!);
  console.log(`acquire+release, one loop, median of ${ROUNDS} blocks of ${BLOCK_MS} ms (client CPU: this process's user+system per cycle):`);
  console.log(`  postgresSource      ${m('source').toFixed(0)} cycles/s [IQR ${sq1.toFixed(0)}..${sq3.toFixed(0)}]   client CPU ${c('source').toFixed(0)} µs/cycle`);
  console.log(`  floor (bare pg)     ${m('floor').toFixed(0)} cycles/s   client CPU ${c('floor').toFixed(0)} µs/cycle   source/floor ${(m('source') / m('floor')).toFixed(2)}x`);
  console.log(`  pool floor          ${m('pool floor').toFixed(0)} cycles/s   client CPU ${c('pool floor').toFixed(0)} µs/cycle   source/pool floor ${(m('source') / m('pool floor')).toFixed(2)}x`);
  console.log(`  advisory lock       ${m('advisory').toFixed(0)} cycles/s   client CPU ${c('advisory').toFixed(0)} µs/cycle   source/advisory ${(m('source') / m('advisory')).toFixed(2)}x`);
  // The same-run bound: with equal round trips, a cycle of the source costs the floor's plus its own extra client CPU;
  // on cores PostgreSQL shares, that extra is time the server does not get either.
  const extra = c('source') - c('floor');
  console.log(
    `  the source's client CPU: ${extra.toFixed(0)} µs/cycle over the floor's ${c('floor').toFixed(0)} (${((extra / c('floor')) * 100).toFixed(0)}% more), ` +
      `of which pg.Pool's per-query work (pool floor - floor) ${(c('pool floor') - c('floor')).toFixed(0)}, the source's own ${(c('source') - c('pool floor')).toFixed(0)}`,
  );
  if (baselineSource !== undefined) {
    const [bq1, bq3] = iqr(rates['baseline']!);
    const [rq1, rq3] = iqr(vsBaseline);
    const gap = m('baseline') - m('source');
    const spread = Math.max(sq3 - sq1, bq3 - bq1);
    console.log(`  baseline            ${m('baseline').toFixed(0)} cycles/s [IQR ${bq1.toFixed(0)}..${bq3.toFixed(0)}]   client CPU ${c('baseline').toFixed(0)} µs/cycle   (FK_BASELINE=${BASELINE})`);
    console.log(`  source/baseline per round: median ${median(vsBaseline).toFixed(3)}x [${rq1.toFixed(3)}, ${rq3.toFixed(3)}]; ${gap > spread ? 'REGRESSION: the source below the baseline by more than the IQR' : 'no regression (within the IQR)'}`);
  }
  console.log(`load average after ${load()}`);
  bare.release();
  advisory.release();
  if (!CYCLE_ONLY) await kindsAndHandOver();
}
finally {
  for (const s of sources) await s.close();
  for (const p of pools) await p.end();
  await root.query(`DROP SCHEMA ${schema} CASCADE`);
  await root.end();
}

/** The lock kinds beside the plain lock, then the hand-over with 16 contenders. */
async function kindsAndHandOver(): Promise<void> {

  // The kinds beside the plain lock, on one source whose pool counts the statements sent.
  const counted = pool(3);
  let statements = 0;
  const query = counted.query.bind(counted) as (...args: unknown[]) => unknown;
  (counted as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
    statements++;
    return query(...args);
  };
  const kindsSource = postgresSource(counted, { leaseMs: 30_000 });
  sources.push(kindsSource);
  const kinds: Record<string, () => Promise<void>> = {
    lock: async () => (await kindsSource.acquireLock('bench/kinds')).release(),
    read: async () => (await kindsSource.acquireReadLock('bench/kinds')).release(),
    write: async () => (await kindsSource.acquireWriteLock('bench/kinds')).release(),
    permit: async () => (await kindsSource.acquirePermit('bench/kinds', { permits: 4 })).release(),
  };
  const kindRates: Record<string, number[]> = { lock: [], read: [], write: [], permit: [] };
  const trips: Record<string, number> = {};
  for (const name of Object.keys(kinds)) {
    await closedLoop(1, 300, kinds[name]!); // warm-up (and the session opened)
    const before = statements;
    for (let i = 0; i < 100; i++) await kinds[name]!();
    trips[name] = (statements - before) / 100;
  }
  for (let round = 0; round < ROUNDS; round++) {
    const order = Object.keys(kinds);
    for (let i = 0; i < round % order.length; i++) order.push(order.shift()!);
    for (const name of order) kindRates[name]!.push((await closedLoop(1, BLOCK_MS, kinds[name]!)).rate);
  }
  const k = (name: string): number => median(kindRates[name]!);
  console.log(`lock kinds, acquire+release, one loop, one source, median of ${ROUNDS} blocks of ${BLOCK_MS} ms:`);
  for (const name of Object.keys(kinds)) {
    const label = name === 'permit' ? 'permit (4 permits)' : name === 'lock' ? 'plain lock (baseline)' : `${name} lock`;
    console.log(`  ${label.padEnd(22)}${k(name).toFixed(0).padStart(6)} cycles/s   ${(k(name) / k('lock')).toFixed(2)}x the plain lock   ${trips[name]!.toFixed(2)} round trips/cycle`);
  }

  // Hand-over: 16 contenders (8 sources x 2), each release timed to the next grant.
  const contenders = Array.from({ length: 8 }, () => {
    const s = postgresSource(pool(3), { leaseMs: 30_000 });
    sources.push(s);
    return s;
  });
  const handoffs: number[] = [];
  let releasedAt: number | null = null;
  const end = performance.now() + 4 * BLOCK_MS;
  await Promise.all(
    contenders.flatMap((s) =>
      [0, 1].map(async () => {
        while (performance.now() < end) {
          const lock = await s.acquireLock('bench/handoff');
          if (releasedAt !== null) handoffs.push(performance.now() - releasedAt);
          releasedAt = performance.now();
          await lock.release();
        }
      }),
    ),
  );
  handoffs.sort((a, b) => a - b);
  const pct = (p: number): number => handoffs[Math.min(handoffs.length - 1, Math.floor((p / 100) * handoffs.length))]!;
  console.log(`hand-over with 16 contenders (${handoffs.length} hand-overs): p50 ${pct(50).toFixed(2)} ms, p99 ${pct(99).toFixed(2)} ms`);
}
