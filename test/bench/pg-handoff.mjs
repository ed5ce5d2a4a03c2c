// Benchmark: the hand-over of one hot resource's fence row between
// PostgresFenceStore admissions. When a holder's closing message (`SET
// CONSTRAINTS ...; RELEASE SAVEPOINT; COMMIT`) goes out, is the next
// admission's open (`BEGIN; EXECUTE <fence statement>; SAVEPOINT`) already
// in PostgreSQL, waiting on the row lock, so that the lock passes with no
// client round trip in the gap? The store's wait line (fence/wait-line.ts) sends
// the next open once the holder's open has been answered; this measures
// when it actually leaves, for fencing() + the store on one hot resource and
// for the same route sending the same messages by hand (no library code; the
// same one-at-a-time line), taking turns. Every message of both is timed in
// the server process as it is handed to the socket and as its answer comes
// back (a wrapper around the pool's clients' query()).
//
// Per hand-over (a holder's open answered, its close sent, the next open):
//   hold           holder's open answered -> its close sent (Node's time with the lock held)
//   close RTT      close sent -> its answer (the COMMIT, with its WAL flush)
//   next sent before the close           the next open left before the holder's close
//   next sent before the close's answer  it left before the COMMIT came back: it was
//                                        (almost surely) queued on the row lock when it passed
//   next answer - close answer           how long after the holder's COMMIT answer the next
//                                        holder was answered (p10/p50/p90)
//
//   npm run build && node test/bench/pg-handoff.mjs
//
// DATABASE_URL (default postgres://root@127.0.0.1:5432/test), FK_DIST (the
// build, default ../../dist), BENCH_SECONDS (per block, default 3),
// BENCH_ROUNDS (default 3), BENCH_CONNECTIONS (HTTP connections = pool size,
// default 32), BENCH_ASYNC_COMMIT=1 (the pool's sessions run with
// synchronous_commit off: a COMMIT without waiting for its WAL flush, the
// case where the next open would come late if it ever does). A script that
// prints figures: nothing asserts on time.
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const dist = process.env.FK_DIST ?? fileURLToPath(new URL('../../dist', import.meta.url));
const seconds = Number(process.env.BENCH_SECONDS ?? 3);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
const asyncCommit = process.env.BENCH_ASYNC_COMMIT === '1';
const TOKEN = '34';

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await measure();

async function serve(schema) {
  const { default: express } = await import('express');
  const { default: pg } = await import('pg');
  const { fencing } = await import(`${dist}/adapters/express/index.js`);
  const { PostgresFenceStore } = await import(`${dist}/adapters/postgres/index.js`);
  const { OPEN_ADVANCE } = await import(`${dist}/adapters/postgres/fence/advance.js`).catch(() => import(`${dist}/adapters/postgres/fence-advance.js`)) // a baseline built before the feature folders;
  const options = `-c search_path=${schema}${asyncCommit ? ' -c synchronous_commit=off' : ''}`;
  const pool = new pg.Pool({ connectionString: url, max: connections, idleTimeoutMillis: 0, options });
  /** Every open and close sent: { kind, pid, sent, answered }. */
  let log = [];
  pool.on('connect', (client) => {
    const query = client.query.bind(client);
    client.query = (config, ...rest) => {
      const text = typeof config === 'string' ? config : config?.text;
      const sent = performance.now();
      const answer = query(config, ...rest);
      const kind = typeof text !== 'string' ? undefined : text.startsWith('BEGIN; EXECUTE') ? 'open' : text.startsWith('SET CONSTRAINTS') ? 'close' : undefined;
      if (kind !== undefined && answer instanceof Promise) {
        const entry = { kind, pid: client.processID, sent, answered: undefined };
        log.push(entry);
        answer.then(() => { entry.answered = performance.now(); }, () => undefined);
      }
      return answer;
    };
  });
  const store = new PostgresFenceStore(pool);
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const empty = (_req, res) => { res.end(); };
  app.get('/store', fencing({ store, resource: 'bench-hot' }), empty);
  // The same messages by hand (as in pg-store-bench.mjs): one open at a time in PostgreSQL, the next once it is answered.
  const prepared = new WeakSet();
  let line = Promise.resolve();
  app.get('/hand', async (_req, res) => {
    const before = line;
    let opened = () => undefined;
    const mine = before.then(() => new Promise((resolve) => { opened = resolve; }));
    line = mine;
    await before;
    const client = await pool.connect();
    try {
      if (!prepared.has(client)) {
        await client.query(`PREPARE hand_adv (text, int8, text, text, text, text) AS ${OPEN_ADVANCE}`);
        prepared.add(client);
      }
      await client.query(`BEGIN; EXECUTE hand_adv(E'bench-hot', ${TOKEN}::int8, NULL::text, NULL::text, NULL::text, NULL::text); SAVEPOINT fencekeeper_fenced`);
    } catch (error) {
      opened();
      client.release(error);
      res.statusCode = 500;
      res.end();
      return;
    }
    opened();
    const close = () => {
      client.query('SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT').then(() => client.release(), (error) => client.release(error));
    };
    if (res.closed) close();
    else res.once('close', close);
    empty(_req, res);
  });
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  process.on('message', (message) => {
    if (message === 'reset') log = [];
    if (message === 'report') process.send({ report: handOvers(log) });
  });
  process.on('disconnect', () => server.close(async () => { await pool.end(); process.exit(0); }));
}

/** The hand-overs in a log: opens in the order they were answered, each holder's close the first after its open on its connection. */
function handOvers(log) {
  const opens = log.filter((e) => e.kind === 'open' && e.answered !== undefined).sort((a, b) => a.answered - b.answered);
  const closes = log.filter((e) => e.kind === 'close' && e.answered !== undefined);
  const out = [];
  for (let i = 0; i + 1 < opens.length; i += 1) {
    const holder = opens[i];
    const next = opens[i + 1];
    const close = closes.find((c) => c.pid === holder.pid && c.sent >= holder.answered);
    if (close === undefined) continue;
    out.push({
      hold: close.sent - holder.answered,
      closeRtt: close.answered - close.sent,
      beforeClose: next.sent < close.sent,
      beforeCloseAnswer: next.sent < close.answered,
      gap: next.answered - close.answered,
    });
  }
  return out;
}

async function measure() {
  const { default: autocannon } = await import('autocannon');
  const { default: pg } = await import('pg');
  const { migrate } = await import(`${dist}/adapters/postgres/index.js`);
  const loadAtStart = loadavg().map((l) => l.toFixed(1)).join(' ');
  const schema = `fk_pghand_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Pool({ connectionString: url, max: 1, options: `-c search_path=${schema}` });
  await admin.query(`CREATE SCHEMA ${schema}`);
  let child;
  try {
    await migrate(admin);
    await admin.query("INSERT INTO fencekeeper_fences (resource, token) VALUES ('bench-hot', 1)");
    child = fork(fileURLToPath(import.meta.url), ['--serve', schema], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const { port } = await new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`server exited (${code})`)));
    });
    const ask = (message) => new Promise((resolve) => {
      const onMessage = (m) => {
        if (m?.report !== undefined) {
          child.off('message', onMessage);
          resolve(m.report);
        }
      };
      child.on('message', onMessage);
      child.send(message);
    });
    const block = async (path, duration) => {
      child.send('reset');
      const result = await autocannon({ url: `http://127.0.0.1:${port}${path}`, headers: { 'fencing-token': TOKEN }, connections, duration });
      if (result.non2xx !== 0 || result.errors !== 0) throw new Error(`${path}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
      return { rps: result.requests.total / duration, handOvers: await ask('report') };
    };
    await block('/store', 1);
    await block('/hand', 1);
    const samples = { '/store': [], '/hand': [] };
    for (let round = 0; round < rounds; round += 1) {
      for (const path of round % 2 === 0 ? ['/store', '/hand'] : ['/hand', '/store']) samples[path].push(await block(path, seconds));
    }
    const quantile = (values, q) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))];
    const ms = (value) => (value === undefined ? '-' : value.toFixed(3));
    console.log(`one hot resource, ${connections} HTTP connections = pool size, ${rounds} rounds x ${seconds} s, synchronous_commit ${asyncCommit ? 'off' : 'as the server sets it'}; times in ms, medians over every hand-over`);
    for (const [path, runs] of Object.entries(samples)) {
      const all = runs.flatMap((r) => r.handOvers);
      const share = (field) => (all.filter((h) => h[field]).length / all.length).toFixed(3);
      const gaps = all.map((h) => h.gap);
      console.log(`${path === '/store' ? 'fencing() + store' : 'by hand          '}  ${quantile(runs.map((r) => r.rps), 0.5).toFixed(0).padStart(5)} req/s  ${all.length} hand-overs  hold ${ms(quantile(all.map((h) => h.hold), 0.5))}  close RTT ${ms(quantile(all.map((h) => h.closeRtt), 0.5))}`
        + `  next sent before the close ${share('beforeClose')}, before its answer ${share('beforeCloseAnswer')}  next answer - close answer p10/p50/p90 ${ms(quantile(gaps, 0.1))}/${ms(quantile(gaps, 0.5))}/${ms(quantile(gaps, 0.9))}`);
    }
    console.log(`load average at the start: ${loadAtStart}, at the end: ${loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  } finally {
    child?.disconnect();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  }
}
