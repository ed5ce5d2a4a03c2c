// Benchmark: fencing() + PostgresFenceStore against the floor PostgreSQL sets
// for the same statements, in one run:
//   store, 1 resource     Express + fencing() on one hot resource (an empty handler), autocannon
//   store, 64 resources   the same, each request fencing one of 64 resources at random
//   Express, bare         the same server's route without fencing(): what Express and
//                         autocannon can do on this machine at all
//   by hand               the same server's route sending the store's two messages itself,
//                         on the same pool, with no fencing() and no store code (one request
//                         per resource sent to the row at a time, like the store): the
//                         store against it is what the library adds
//   pgbench floors        pgbench running the statements the store sends, sent
//                         - as the store sends them: two messages,
//                           `BEGIN; EXECUTE <the probe>; SAVEPOINT` and
//                           `SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT; COMMIT`
//                           (every mark starts at the bench's token, so every admission is
//                           the same holder again: the store opens with the probe, the
//                           equal token's row lock without the upsert, fence/open.ts);
//                         - as one message (all six statements together: no client could do less);
//                         - as four messages (BEGIN, the upsert, SAVEPOINT, the close: how
//                           the store sent them before the open became one message and
//                           before the probe);
//                         on one row, and the two-message form over 64 rows.
// With one resource every admission waits for the previous one's commit (the
// row lock), so the figure is PostgreSQL's commit rate on one row; with 64
// resources admissions run side by side and the limit is the machine's commit
// rate or, on a small machine, the Node process itself (compare with the bare
// route). pgbench substitutes `:name` even inside quotes and skips `::`, so
// the resource names here carry no colon. The store's figures are put beside the floors measured in the
// same round (blocks alternate, medians of per-round ratios are printed), so
// other load on the machine falls on both alike.
//
//   npm run build && node test/bench/pg-store-bench.mjs
//
// Needs pgbench on PATH (Debian: package postgresql-client-15, which the
// server package pulls in; `apt-get install -y postgresql-client-15`).
// DATABASE_URL (default postgres://root@127.0.0.1:5432/test): a schema of its
// own is made there and dropped after. BENCH_CONNECTIONS (default 32): HTTP
// connections, the store's pool size and pgbench's clients alike.
// BENCH_SECONDS (per block, default 3), BENCH_ROUNDS (default 3). FK_DIST: the
// built package the server runs (default ../../dist), e.g. another checkout's
// dist/ to compare before and after a change.
// A script that prints figures: nothing asserts on time.
import { execFile, fork } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { tmpdir, loadavg, cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { serverCpu as cpuOf } from './server-cpu.mjs';

const url = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
const seconds = Number(process.env.BENCH_SECONDS ?? 3);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const RESOURCES = 64;
const TOKEN = '34';
const dist = process.env.FK_DIST ?? new URL('../../dist', import.meta.url).pathname;

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await measure();

async function serve(schema) {
  const { default: express } = await import('express');
  const { fencing } = await import(`${dist}/adapters/express/index.js`);
  const { PostgresFenceStore } = await import(`${dist}/adapters/postgres/index.js`);
  const { default: pg } = await import('pg');
  // idleTimeoutMillis 0: the same backends serve every block, so their CPU can be read.
  const pool = new pg.Pool({ connectionString: url, max: connections, idleTimeoutMillis: 0, options: `-c search_path=${schema}` });
  const backends = new Set();
  pool.on('connect', (client) => backends.add(client.processID));
  const store = new PostgresFenceStore(pool);
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  const empty = (_req, res) => { res.end(); };
  app.get('/bare', empty);
  app.get('/hot', fencing({ store, resource: 'bench-hot' }), empty);
  app.get('/many', fencing({ store, resource: () => `bench-many-${1 + Math.floor(Math.random() * RESOURCES)}` }), empty);
  // The store's two messages by hand, on the same pool, with no fencing() and no store code: what the
  // library adds is the store's figure against this one. Like the store (fence/wait-line.ts), one request per
  // resource is sent to wait on the row, the next once its open has been answered; without that, 32
  // waiters on one row cost PostgreSQL far more per commit than either, and the comparison would
  // measure that. The token is the bench's, the handler the same empty one.
  const { OPEN_ADVANCE, OPEN_EQUAL } = await import(`${dist}/adapters/postgres/fence/advance.js`).catch(() => import(`${dist}/adapters/postgres/fence-advance.js`)) // a baseline built before the feature folders;
  const handPrepared = new WeakSet();
  const handLines = new Map(); // resource -> the promise of the open before ours
  const byHand = (pick) => async (_req, res) => {
    const resource = pick();
    const before = handLines.get(resource) ?? Promise.resolve();
    let opened = () => undefined;
    const mine = new Promise((resolve) => { opened = resolve; });
    const chained = before.then(() => mine);
    handLines.set(resource, chained);
    await before;
    const client = await pool.connect();
    try {
      if (!handPrepared.has(client)) {
        // The store's open for an equal token (the bench's case): the probe, in a build that has it.
        await client.query(`PREPARE hand_adv (text, int8, text, text, text, text) AS ${OPEN_EQUAL ?? OPEN_ADVANCE}`);
        handPrepared.add(client);
      }
      const answers = await client.query(`BEGIN; EXECUTE hand_adv(E'${resource}', ${TOKEN}::int8, NULL::text, NULL::text, NULL::text, NULL::text); SAVEPOINT fencekeeper_fenced`);
      const row = answers[1].rows[0];
      if (OPEN_EQUAL === undefined ? row !== undefined && row.token !== TOKEN : row === undefined) throw new Error('the hand route\'s fence statement was refused');
    } catch (error) {
      opened();
      client.release(error);
      res.statusCode = 500;
      res.end();
      return;
    } finally {
      if (handLines.get(resource) === chained) handLines.delete(resource);
    }
    opened();
    // Closed when the response has gone out, or the client left (autocannon hangs up at a block's end):
    // never leave a transaction holding the row.
    const close = () => {
      client.query('SET CONSTRAINTS ALL IMMEDIATE; RELEASE SAVEPOINT fencekeeper_fenced; COMMIT').then(() => client.release(), (error) => client.release(error));
    };
    if (res.closed) close();
    else res.once('close', close);
    empty(_req, res);
  };
  app.get('/hand-hot', byHand(() => 'bench-hot'));
  app.get('/hand-many', byHand(() => `bench-many-${1 + Math.floor(Math.random() * RESOURCES)}`));
  const server = app.listen(0, '127.0.0.1', () => process.send({ port: server.address().port }));
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send({ cpu: user + system });
    }
    if (message === 'backends') process.send({ backends: [...backends] });
  });
  process.on('disconnect', () => server.close(async () => { await pool.end(); process.exit(0); }));
}

async function measure() {
  const { default: autocannon } = await import('autocannon');
  const { default: pg } = await import('pg');
  const { migrate } = await import(`${dist}/adapters/postgres/index.js`);
  // The very texts the store prepares on each of its connections (fence/open.ts), from the build the server runs
  // (OPEN_EQUAL: undefined in a build from before the probe, which opened with the upsert alone).
  const { OPEN_ADVANCE, OPEN_EQUAL } = await import(`${dist}/adapters/postgres/fence/advance.js`).catch(() => import(`${dist}/adapters/postgres/fence-advance.js`)) // a baseline built before the feature folders;
  const loadAtStart = loadavg().map((l) => l.toFixed(2)).join(' ');
  const run = promisify(execFile);
  const delay = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const TICK_MS = 10; // USER_HZ is 100 on Linux
  // utime + stime of PostgreSQL backends (fields 14 and 15 of /proc/<pid>/stat),
  // by pid; a backend that is gone (the store destroys the client of an admission
  // aborted when autocannon hangs up at the end of a block) is left out.
  const backendTicks = (pids) => new Map(pids.flatMap((pid) => {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      return [[pid, Number(fields[11]) + Number(fields[12])]];
    } catch {
      return [];
    }
  }));
  /** Ticks used between two backendTicks() readings by the backends in both; NaN when none was readable (the server is not local). */
  const ticksBetween = (before, after) => {
    let ticks = 0;
    let seen = 0;
    for (const [pid, end] of after) {
      const start = before.get(pid);
      if (start === undefined) continue;
      ticks += end - start;
      seen += 1;
    }
    return seen === 0 ? Number.NaN : ticks;
  };
  const { stdout: pgbenchVersion } = await run('pgbench', ['--version']).catch(() => {
    throw new Error('pgbench is not on PATH (Debian: apt-get install -y postgresql-client-15)');
  });

  const schema = `fk_pgstore_${Math.random().toString(16).slice(2, 10)}`;
  const admin = new pg.Pool({ connectionString: url, max: 1, options: `-c search_path=${schema}` });
  await admin.query(`CREATE SCHEMA ${schema}`);
  const dir = mkdtempSync(join(tmpdir(), 'fk-pgstore-'));
  let child;
  try {
    await migrate(admin);
    // The marks start at the bench's token: every admission is the same holder again, the store's probe (fence/open.ts) from its second on.
    await admin.query(`INSERT INTO fencekeeper_fences (resource, token) SELECT 'bench-many-' || g, ${TOKEN} FROM generate_series(1, ${RESOURCES}) g`);
    await admin.query(`INSERT INTO fencekeeper_fences (resource, token) VALUES ('bench-hot', ${TOKEN})`);

    // pgbench scripts. Each client prepares the upsert and the probe once (PREPARE is per
    // connection, like the store's), then runs the transaction as many times as it can.
    // The store opens an equal token's admission with the probe (OPEN_EQUAL); the four
    // messages of before with the upsert.
    const prepare = `\\if :prepped = 0\nPREPARE adv (text, int8, text, text, text, text) AS ${OPEN_ADVANCE.replaceAll('\n', ' ')};\nPREPARE eq (text, int8, text, text, text, text) AS ${(OPEN_EQUAL ?? OPEN_ADVANCE).replaceAll('\n', ' ')};\n\\set prepped 1\n\\endif\n`;
    const open = (resource) => `BEGIN \\; EXECUTE eq(E'${resource}', ${TOKEN}::int8, NULL, NULL, NULL, NULL) \\; SAVEPOINT fencekeeper_fenced`;
    const close = 'SET CONSTRAINTS ALL IMMEDIATE \\; RELEASE SAVEPOINT fencekeeper_fenced \\; COMMIT';
    const scripts = {
      'two messages (as the store sends them)': `${prepare}${open('bench-hot')};\n${close};\n`,
      'one message': `${prepare}${open('bench-hot')} \\; ${close};\n`,
      'four messages (as before)': `${prepare}BEGIN;\nEXECUTE adv(E'bench-hot', ${TOKEN}::int8, NULL, NULL, NULL, NULL);\nSAVEPOINT fencekeeper_fenced;\n${close};\n`,
      'two messages, 64 rows': `\\set r random(1, ${RESOURCES})\n${prepare}${open('bench-many-:r')};\n${close};\n`,
    };
    const files = Object.fromEntries(Object.entries(scripts).map(([name, text], i) => {
      const file = join(dir, `script${i}.sql`);
      writeFileSync(file, text);
      return [name, file];
    }));
    const parsed = new URL(url);
    // pgbench runs under bash, whose `times` prints the CPU its children used:
    // pgbench's own CPU per transaction. Its backends carry an application_name
    // of this run's, so their CPU is read from /proc between 0.5 s in and
    // 0.3 s before the end (they exit with pgbench), over that window's share of the transactions.
    const appName = `fk_${schema}`;
    const pgbench = async (name) => {
      const args = ['-h', parsed.hostname, '-p', parsed.port || '5432', '-U', decodeURIComponent(parsed.username || 'root'), '-n', '-M', 'simple',
        '-D', 'prepped=0', '-c', String(connections), '-j', '2', '-T', String(seconds), '-f', files[name], parsed.pathname.slice(1)];
      const running = run('bash', ['-c', 'pgbench "$@" && times', 'pgbench', ...args], { env: { ...process.env, PGOPTIONS: `-c search_path=${schema}`, PGAPPNAME: appName } });
      const window = (async () => {
        await delay(500);
        const { rows } = await admin.query('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [appName]);
        const pids = rows.map((row) => row.pid);
        const ticks0 = backendTicks(pids);
        const start = performance.now();
        await delay(seconds * 1000 - 800);
        return { ticks: ticksBetween(ticks0, backendTicks(pids)), ms: performance.now() - start };
      })();
      const { stdout } = await running;
      const backend = await window;
      const failed = /number of failed transactions: (\d+)/.exec(stdout);
      if (failed !== null && failed[1] !== '0') throw new Error(`pgbench ${name}: ${failed[1]} failed transactions\n${stdout}`);
      const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(stdout);
      if (tps === null) throw new Error(`pgbench ${name}: no tps in\n${stdout}`);
      const transactions = /number of transactions actually processed: (\d+)/.exec(stdout);
      // `times`: the shell's user and system time, then its children's (pgbench's).
      const times = [...stdout.matchAll(/(\d+)m([\d.]+)s/g)].map((m) => Number(m[1]) * 60 + Number(m[2]));
      const clientUs = times.length >= 4 && transactions !== null ? ((times[2] + times[3]) * 1e6) / Number(transactions[1]) : Number.NaN;
      const pgUs = (backend.ticks * TICK_MS * 1000) / (Number(tps[1]) * (backend.ms / 1000));
      return { rps: Number(tps[1]), clientUs, pgUs };
    };

    child = fork(fileURLToPath(import.meta.url), ['--serve', schema], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const { port } = await new Promise((resolve, reject) => {
      child.once('message', resolve);
      child.once('exit', (code) => reject(new Error(`server exited (${code})`)));
    });
    const serverCpu = () => cpuOf(child);
    const storeBackends = () => new Promise((resolve) => {
      const onMessage = (message) => {
        if (Array.isArray(message?.backends)) {
          child.off('message', onMessage);
          resolve(message.backends);
        }
      };
      child.on('message', onMessage);
      child.send('backends');
    });
    const store = async (path, duration) => {
      const pids = await storeBackends();
      const cpu0 = await serverCpu();
      const ticks0 = backendTicks(pids);
      const client0 = process.cpuUsage();
      const result = await autocannon({ url: `http://127.0.0.1:${port}${path}`, headers: { 'fencing-token': TOKEN }, connections, duration });
      const client = process.cpuUsage(client0);
      const ticks = ticksBetween(ticks0, backendTicks(pids));
      const cpu1 = await serverCpu();
      if (result.non2xx !== 0 || result.errors !== 0) throw new Error(`${path}: ${result.non2xx} non-2xx answers, ${result.errors} errors`);
      const total = result.requests.total;
      return { rps: total / duration, cpuUs: (cpu1 - cpu0) / total, clientUs: (client.user + client.system) / total, pgUs: (ticks * TICK_MS * 1000) / total };
    };

    // Warm up: JIT, the pools, every connection's PREPARE.
    if (process.env.BENCH_VERBOSE) console.error('warming up');
    await store('/hot', 1);
    await store('/many', 1);
    await store('/hand-hot', 1);
    await store('/hand-many', 1);

    const blocks = [
      ['Express, no fencing (the HTTP ceiling)', () => store('/bare', seconds)],
      ['store, 1 resource', () => store('/hot', seconds)],
      ['by hand, 1 resource (no library)', () => store('/hand-hot', seconds)],
      ['two messages (as the store sends them)', () => pgbench('two messages (as the store sends them)')],
      ['one message', () => pgbench('one message')],
      ['four messages (as before)', () => pgbench('four messages (as before)')],
      ['store, 64 resources', () => store('/many', seconds)],
      ['by hand, 64 resources (no library)', () => store('/hand-many', seconds)],
      ['two messages, 64 rows', () => pgbench('two messages, 64 rows')],
    ];
    const samples = new Map(blocks.map(([name]) => [name, []]));
    for (let round = 0; round < rounds; round += 1) {
      const order = round % 2 === 0 ? blocks : [...blocks].reverse();
      for (const [name, block] of order) {
        const result = await block();
        if (process.env.BENCH_VERBOSE) console.error(`round ${round + 1}: ${name}: ${result.rps.toFixed(0)}/s`);
        samples.get(name).push(typeof result === 'number' ? { rps: result } : result);
      }
    }

    const median = (values) => {
      const sorted = [...values].sort((x, y) => x - y);
      const mid = sorted.length >> 1;
      return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    };
    const rps = (name) => median(samples.get(name).map((s) => s.rps));
    const ratio = (a, b) => median(samples.get(a).map((s, i) => s.rps / samples.get(b)[i].rps));
    const { rows: [{ server_version: version }] } = await admin.query('SHOW server_version');
    console.log(`PostgreSQL ${version}, ${pgbenchVersion.trim()}, node ${process.version}; ${connections} HTTP connections = pool size = pgbench clients; ${rounds} rounds of ${seconds} s per block, medians`);
    // CPU per request or transaction: the Express process, the load generator
    // (autocannon in this process, or pgbench), PostgreSQL's backends doing the work.
    const perOp = (name, field) => median(samples.get(name).map((s) => s[field] ?? Number.NaN));
    const cpuSum = (name) => (Number.isNaN(perOp(name, 'cpuUs')) ? 0 : perOp(name, 'cpuUs')) + perOp(name, 'clientUs') + perOp(name, 'pgUs');
    const us = (value) => (Number.isNaN(value) ? '-' : value.toFixed(0)).padStart(8);
    console.log('block                                      req/s or tx/s   CPU µs per request or transaction:');
    console.log('                                                            Express  autocannon/pgbench  PostgreSQL    sum');
    for (const [name] of blocks) {
      console.log(`${name.padEnd(42)} ${rps(name).toFixed(0).padStart(10)}   ${us(perOp(name, 'cpuUs'))}  ${us(perOp(name, 'clientUs'))}            ${us(perOp(name, 'pgUs'))}  ${us(cpuSum(name))}`);
    }
    const line = (label, a, b, note = '') => console.log(`${label.padEnd(66)} ${ratio(a, b).toFixed(3)}x${note === '' ? '' : `   (${note})`}`);
    const HOT = 'store, 1 resource';
    const MANY = 'store, 64 resources';
    const HAND_HOT = 'by hand, 1 resource (no library)';
    const HAND_MANY = 'by hand, 64 resources (no library)';
    const TWO = 'two messages (as the store sends them)';
    const ONE = 'one message';
    const BARE = 'Express, no fencing (the HTTP ceiling)';
    console.log('one hot resource:');
    line('  store / one message (pgbench)', HOT, ONE, 'the issue\'s aim: >= 0.9x');
    line('  store / two messages (pgbench: same statements, same messages)', HOT, TWO);
    line('  store / by hand (same route, same pool, no library)', HOT, HAND_HOT, 'what fencing() and the store add');
    line('  by hand / one message', HAND_HOT, ONE, 'the aim\'s bound for any Express route sending these statements');
    line('  two messages / one message (pgbench)', TWO, ONE, 'the bound of any client that answers between open and close');
    line('  store / four messages (as before)', HOT, 'four messages (as before)');
    line('  two messages / four messages (pgbench)', TWO, 'four messages (as before)');
    console.log('64 resources:');
    line('  store / two messages over 64 rows (pgbench)', MANY, 'two messages, 64 rows', 'the issue\'s aim: >= 0.8x');
    line('  store / by hand (same route, same pool, no library)', MANY, HAND_MANY, 'what fencing() and the store add');
    line('  by hand / two messages over 64 rows', HAND_MANY, 'two messages, 64 rows', 'the aim\'s bound for any Express route sending these statements');
    line('  store / Express without fencing', MANY, BARE);
    line('  by hand / Express without fencing', HAND_MANY, BARE);
    // With 64 resources the machine's CPU is the limit: requests per CPU-second, the store against its floor.
    console.log(`64 resources, CPU per op: floor ${cpuSum('two messages, 64 rows').toFixed(0)} µs / store ${cpuSum(MANY).toFixed(0)} µs = ${(cpuSum('two messages, 64 rows') / cpuSum(MANY)).toFixed(3)}x   (the store's ratio when the cores are the limit)`);
    console.log(`64 resources, CPU per op: by hand ${cpuSum(HAND_MANY).toFixed(0)} µs / store ${cpuSum(MANY).toFixed(0)} µs = ${(cpuSum(HAND_MANY) / cpuSum(MANY)).toFixed(3)}x;  1 resource: by hand ${cpuSum(HAND_HOT).toFixed(0)} µs / store ${cpuSum(HOT).toFixed(0)} µs = ${(cpuSum(HAND_HOT) / cpuSum(HOT)).toFixed(3)}x`);
    console.log(`${cpus().length} CPUs, load average at the start ${loadAtStart}, at the end ${loadavg().map((l) => l.toFixed(2)).join(' ')} ( pgbench, the Express server and autocannon share these cores with PostgreSQL)`);
  } finally {
    child?.disconnect();
    rmSync(dir, { recursive: true, force: true });
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  }
}
