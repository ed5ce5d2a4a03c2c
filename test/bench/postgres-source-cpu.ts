// The PostgreSQL source's own client CPU per acquireLock + release, apart
// from the network and the server (not in the suite): the source over a pool
// object that answers every statement at once with the row PostgreSQL would
// (a grant, a leave), so what is measured is the source's JavaScript alone:
// its join, grant, release and bookkeeping, without pg's or pg.Pool's work.
// A figure beside postgres-source.ts's same-run bound (source - pool floor),
// which a loaded machine blurs; this one stays steady under load.
//   bash test/bench/plain.sh postgres-source-cpu
// env: FK_CYCLES (50,000 per rep), FK_REPS (5), FK_BASELINE: the root of another build of
//   the package (a checkout with dist/): its source alternates with this one, rep by rep.
import { EventEmitter } from 'node:events';
import { loadavg } from 'node:os';
import { postgresSource, type PgSourcePool, type PostgresSource } from '../../adapters/postgres/index.js';
import { median } from './closed-loop.js';

const CYCLES = Number(process.env['FK_CYCLES'] ?? 50_000);
const REPS = Number(process.env['FK_REPS'] ?? 5);
const BASELINE = process.env['FK_BASELINE'];
const load = (): string => loadavg().map((l) => l.toFixed(2)).join(' ');

type Make = (pool: PgSourcePool, options: { leaseMs: number }) => PostgresSource;

/** A pool whose statements are answered at once; its one checked-out connection hears its own NOTIFY (the source's LISTEN probe). */
function answeringPool(): PgSourcePool {
  let entry = 0;
  let token = 0;
  const connection = new EventEmitter() as EventEmitter & { query: PgSourcePool['query']; release: () => void };
  const answer = (text: string, values: unknown[] | undefined): { rows: unknown[] } => {
    if (text.includes('pg_notify')) {
      const [channel, payload] = values as [string, string];
      setImmediate(() => connection.emit('notification', { channel, payload }));
    } else if (text.includes('session_open')) return { rows: [{ session_id: '1', system_identifier: '1', database_oid: '1' }] };
    else if (text.includes('lock_enter')) return { rows: [{ status: 'granted', entry_id: String(++entry), token: String(++token), head: false, holder_ms: null, reaped: 0 }] };
    else if (text.includes('lock_leave')) return { rows: [{ granted: null }] };
    return { rows: [{}] };
  };
  connection.query = (q) => Promise.resolve(answer(q.text, q.values));
  connection.release = () => undefined;
  return { options: { max: 3 }, connect: () => Promise.resolve(connection as never), query: (q) => Promise.resolve(answer(q.text, q.values)) };
}

async function cpuPerCycle(make: Make): Promise<number> {
  const source = make(answeringPool(), { leaseMs: 600_000 });
  const cycle = async (): Promise<void> => (await source.acquireLock('bench/cpu')).release();
  for (let i = 0; i < 20_000; i++) await cycle(); // warm-up (and the session opened)
  const before = process.cpuUsage();
  for (let i = 0; i < CYCLES; i++) await cycle();
  const used = process.cpuUsage(before);
  await source.close();
  return (used.user + used.system) / CYCLES;
}

const baseline = BASELINE === undefined ? undefined : ((await import(`${BASELINE.replace(/\/$/, '')}/dist/adapters/postgres/index.js`)) as { postgresSource: Make }).postgresSource;
const ours: number[] = [];
const theirs: number[] = [];
console.log(`the source's own CPU per acquire+release, ${REPS} reps x ${CYCLES} cycles; load average ${load()}`);
for (let rep = 0; rep < REPS; rep++) {
  ours.push(await cpuPerCycle(postgresSource as Make));
  if (baseline !== undefined) theirs.push(await cpuPerCycle(baseline));
  console.log(`  rep ${rep + 1}: this build ${ours.at(-1)!.toFixed(2)} µs/cycle${baseline === undefined ? '' : `, baseline ${theirs.at(-1)!.toFixed(2)} µs/cycle`}; load ${load()}`);
}
console.log(`median: this build ${median(ours).toFixed(2)} µs/cycle${baseline === undefined ? '' : `, baseline (FK_BASELINE=${BASELINE}) ${median(theirs).toFixed(2)} µs/cycle`}; load average ${load()}`);
