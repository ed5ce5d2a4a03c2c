/**
 * `fencekeeper demo`: the paused holder, played for real.
 *
 *   t0  holder A acquires jobs/reindex (token n) and writes to a PostgreSQL
 *       row, an S3 object and an HTTP service
 *   t1  A is frozen (SIGSTOP, as a long stop-the-world garbage-collection
 *       pause would freeze it) right after checking that it holds the lock
 *   t2  ZooKeeper hears nothing from A for its session timeout, expires the
 *       session and deletes A's lock node
 *   t3  holder B acquires (token m > n) and writes
 *   t4  A resumes (SIGCONT) and writes with token n, still believing it holds
 *       the lock: every resource refuses it and keeps B's data
 *
 * Exit code 0 only if every stale write was refused and every resource ends
 * with B's data. DEMO_UNFENCED=1 (or --unfenced) performs the same writes
 * without fencing, to show the corruption the tokens prevent: it exits 1.
 */
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseToken } from '../../index.js';
import { lockServiceFrom } from '../services/index.js';
import { HolderProcess, type HolderMessage } from './holder-process.js';
import { formatSeries, startDemoMetrics, type DemoMetrics, type DemoSeries } from './metrics.js';
import { openDemoResources } from './resources.js';
import { startService, type DemoService } from './service.js';
import { timelineSvg, type TimelineEvent } from './timeline.js';

interface Row {
  readonly at: number;
  readonly actor: string;
  readonly token: string;
  readonly action: string;
  readonly outcome: string;
}

export interface DemoOptions {
  readonly unfenced?: boolean;
  /** Record fencekeeper's metrics in every process of the demo and print them at the end (--metrics). */
  readonly metrics?: boolean;
  readonly print?: (line: string) => void;
  /** The lock service URL (--lock-service); default $FENCEKEEPER_LOCK_SERVICE, else the ZooKeeper of $ZOOKEEPER. */
  readonly lockService?: string;
  /** Where to write the timeline's picture (SVG) (--timeline); default a file in the OS's temporary folder. The demo prints the path. */
  readonly timeline?: string;
}

/** Who ends A's grant while it is frozen, and how, by the lock service's URL scheme. */
function expiryOf(url: string | undefined): { readonly actor: string; readonly what: string } {
  const scheme = url === undefined || url === '' ? 'zookeeper' : url.slice(0, url.indexOf(':')).toLowerCase();
  switch (scheme) {
    case 'redis':
      return { actor: 'redis', what: "A's lock key expires: no renewal came within its TTL" };
    case 'redlock':
      return { actor: 'redlock', what: "A's lock key expires on the nodes: no renewal came within its TTL" };
    case 'etcd':
      return { actor: 'etcd', what: "A's lease expires: its lock key is deleted" };
    default:
      return { actor: 'zookeeper', what: "A's session times out: its lock node is deleted" };
  }
}

function formatTable(rows: readonly Row[], start: number): string[] {
  const header = ['time', 'actor', 'token', 'action', 'outcome'];
  const cells = rows.map((r) => [`t+${((r.at - start) / 1000).toFixed(2)}s`, r.actor, r.token, r.action, r.outcome]);
  const widths = header.map((h, c) => Math.max(h.length, ...cells.map((row) => (row[c] as string).length)));
  const line = (cols: string[]): string => cols.map((v, c) => v.padEnd(widths[c] as number)).join(' | ').trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('-+-'), ...cells.map(line)];
}

export async function runDemo(options: DemoOptions = {}): Promise<number> {
  const print = options.print ?? ((line: string) => process.stdout.write(`${line}\n`));
  const unfenced = options.unfenced ?? process.env.DEMO_UNFENCED === '1';
  const withMetrics = options.metrics ?? process.env.DEMO_METRICS === '1';
  const run = `${process.pid}_${Date.now().toString(36)}`;
  const zookeeper = process.env.ZOOKEEPER ?? '127.0.0.1:2181';
  const databaseUrl = process.env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test';
  const lockName = process.env.DEMO_LOCK ?? 'jobs/reindex';
  const sessionTimeoutMs = 4000;
  const lockServiceUrl = options.lockService ?? process.env.FENCEKEEPER_LOCK_SERVICE;
  const address = lockServiceFrom({ zookeeper, 'session-timeout': String(sessionTimeoutMs), ...(options.lockService !== undefined ? { 'lock-service': options.lockService } : {}) });
  const expiry = expiryOf(lockServiceUrl);
  const table = `fencekeeper_demo_${run}`;
  const start = Date.now();
  const rows: Row[] = [];
  const note = (actor: string, token: string, action: string, outcome: string, at = Date.now()): void => {
    rows.push({ at, actor, token, action, outcome });
  };
  // The same moments, at the same real times, for the timeline's picture.
  const events: TimelineEvent[] = [];
  const writes = (actor: string, messages: readonly HolderMessage[]): void => {
    for (const w of messages) events.push({ kind: 'write', actor, at: w.at, resource: String(w.resource), outcome: String(w.outcome) });
  };

  print(`fencekeeper demo: a paused lock holder, against real servers${unfenced ? ' (UNFENCED: writes skip the token check)' : ''}`);
  print(`  ${address.description}, PostgreSQL ${databaseUrl.replace(/\/\/[^@]*@/, '//')}, S3 ${process.env.S3_ENDPOINT ?? 'http://127.0.0.1:7480'}`);

  const { default: pg } = await import('pg');
  const { migrate } = await import('../../../adapters/postgres/index.js');
  const admin = new pg.Pool({ connectionString: databaseUrl, max: 1 });
  const locks = await address.connect();
  let service: DemoService | null = null;
  const holders: HolderProcess[] = [];
  let metrics: DemoMetrics | null = null;
  const bucket = process.env.DEMO_BUCKET ?? 'fencekeeper-demo';
  const key = `reindex/${run}.txt`;
  try {
    await migrate(admin);
    await admin.query(`create table ${table} (id int primary key, body text not null, fencing_token bigint not null)`);
    const { S3Client, CreateBucketCommand } = await import('@aws-sdk/client-s3');
    const s3 = new S3Client({
      endpoint: process.env.S3_ENDPOINT ?? 'http://127.0.0.1:7480',
      region: process.env.S3_REGION ?? 'us-east-1',
      forcePathStyle: true,
      credentials: { accessKeyId: process.env.S3_ACCESS_KEY ?? 'test', secretAccessKey: process.env.S3_SECRET_KEY ?? 'testsecret' },
    });
    try {
      await s3.send(new CreateBucketCommand({ Bucket: bucket }));
    } catch (error) {
      const name = (error as { name?: string }).name;
      if (name !== 'BucketAlreadyOwnedByYou' && name !== 'BucketAlreadyExists') throw error;
    } finally {
      s3.destroy();
    }
    // This process runs the HTTP service: its metrics are the service's.
    if (withMetrics) metrics = await startDemoMetrics();
    service = await startService(databaseUrl, `demo/${run}/report`, unfenced);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      ZOOKEEPER: zookeeper,
      ...(lockServiceUrl !== undefined ? { FENCEKEEPER_LOCK_SERVICE: lockServiceUrl } : {}),
      DATABASE_URL: databaseUrl,
      DEMO_TABLE: table,
      DEMO_BUCKET: bucket,
      DEMO_KEY: key,
      DEMO_URL: service.url,
      DEMO_LOCK: lockName,
      DEMO_SESSION_TIMEOUT_MS: String(sessionTimeoutMs),
      DEMO_UNFENCED: unfenced ? '1' : '0',
      DEMO_METRICS: withMetrics ? '1' : '0',
    };

    // t0: A acquires and writes.
    const a = new HolderProcess('A', { ...env, DEMO_PAUSE: '1' });
    holders.push(a);
    const acquiredA = await a.next('acquired');
    const tokenA = acquiredA.token as string;
    note('A', tokenA, `acquire ${lockName} (session timeout ${String(acquiredA.sessionTimeoutMs)} ms)`, 'granted', acquiredA.at);
    events.push({ kind: 'acquire', actor: 'A', at: acquiredA.at, token: tokenA });
    const checked = await a.next('checked');
    for (const w of a.messages.filter((m) => m.event === 'write')) note('A', tokenA, `write ${String(w.resource)}`, `${String(w.outcome)} (${String(w.detail)})`, w.at);
    note('A', tokenA, 'checks lock.held before its next write', String(checked.held), checked.at);
    writes('A', a.messages.filter((m) => m.event === 'write'));

    // t1: the pause.
    a.child.kill('SIGSTOP');
    note('A', tokenA, 'SIGSTOP: frozen like a long GC pause', 'paused');
    events.push({ kind: 'pause', actor: 'A', at: Date.now() });

    // t2: the lock service ends A's grant (a session expired, a key's TTL run out, a lease expired).
    const expiredBy = Date.now() + 30_000;
    for (;;) {
      const [holder] = await locks.queue(lockName);
      if (holder === undefined || holder.token !== parseToken(tokenA)) break;
      if (Date.now() > expiredBy) throw new Error("A's grant did not end within 30 s");
      await new Promise((r) => setTimeout(r, 50));
    }
    note(expiry.actor, tokenA, expiry.what, 'lock free');
    events.push({ kind: 'expire', actor: expiry.actor, at: Date.now(), what: expiry.what });

    // t3: B acquires with a larger token and writes.
    const b = new HolderProcess('B', { ...env, DEMO_PAUSE: '0' });
    holders.push(b);
    const acquiredB = await b.next('acquired');
    const tokenB = acquiredB.token as string;
    note('B', tokenB, `acquire ${lockName}`, `granted (token ${BigInt(tokenB) > BigInt(tokenA) ? '>' : '<='} A's)`, acquiredB.at);
    events.push({ kind: 'acquire', actor: 'B', at: acquiredB.at, token: tokenB });
    await b.next('done');
    for (const w of b.messages.filter((m) => m.event === 'write')) note('B', tokenB, `write ${String(w.resource)}`, `${String(w.outcome)} (${String(w.detail)})`, w.at);
    note('B', tokenB, `release ${lockName}`, 'released');
    writes('B', b.messages.filter((m) => m.event === 'write'));
    events.push({ kind: 'release', actor: 'B', at: (await b.next('released')).at });

    // t4: A resumes and writes with its old token, without checking again.
    a.child.kill('SIGCONT');
    note('A', tokenA, 'SIGCONT: resumes, still believing it holds the lock', 'running');
    events.push({ kind: 'resume', actor: 'A', at: Date.now() });
    a.send('go');
    const resumed = await a.next('resumed');
    note('A', tokenA, 'reads lock.held (first thing after resuming)', `${String(resumed.held)}${resumed.reason ? ` (${String(resumed.reason)})` : ''}`, resumed.at);
    const endA = await a.next('released');
    await a.next('done');
    const staleWrites = a.messages.filter((m) => m.event === 'write').slice(3);
    writes('A', staleWrites);
    events.push({ kind: 'end', actor: 'A', at: endA.at });
    for (const w of staleWrites) note('A', tokenA, `write ${String(w.resource)} with its old token`, `${String(w.outcome)} (${String(w.detail)})`, w.at);

    // What the resources hold now.
    const resources = await openDemoResources({ ...env });
    const final = await resources.read();
    await resources.close();

    rows.sort((x, y) => x.at - y.at);
    print('');
    for (const line of formatTable(rows, rows[0]?.at ?? start)) print(line);
    print('');
    print('final state:');
    let ok = true;
    for (const name of ['postgres', 's3', 'http'] as const) {
      const stale = staleWrites.find((w) => w.resource === name);
      const refused = stale?.outcome === 'refused';
      const holdsB = final[name].token === tokenB && (final[name].body ?? '').includes('written by B');
      ok &&= refused && holdsB;
      print(`  ${name.padEnd(8)} holds "${final[name].body ?? '(nothing)'}" (token ${final[name].token ?? '-'}): A's stale write ${refused ? 'refused' : 'ACCEPTED'}${holdsB ? '' : " — B's data LOST"}`);
    }
    if (metrics !== null) {
      print('');
      print('metrics (fencekeeper/opentelemetry), per process:');
      const processes: [string, readonly DemoSeries[]][] = [
        ['holder A', seriesOf(await a.next('metrics'))],
        ['holder B', seriesOf(await b.next('metrics'))],
        ['HTTP service (the demo process)', await metrics.collect()],
      ];
      for (const [name, series] of processes) {
        print(`  ${name}:`);
        for (const s of series) print(`    ${formatSeries(s)}`);
        if (series.length === 0) print('    (nothing recorded)');
      }
    }
    print('');
    print(
      ok
        ? `PASS: every resource refused A's stale token ${tokenA} after B's ${tokenB}; the lock alone could not have stopped A.`
        : `FAIL: a stale write was accepted${unfenced ? ' (fencing disabled)' : ''}: a paused holder corrupted the data.`,
    );
    const picture = options.timeline ?? join(tmpdir(), `fencekeeper-demo-${run}.svg`);
    const when = new Date(start).toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
    const subtitle = `${address.description}, session timeout ${sessionTimeoutMs} ms; PostgreSQL, S3 (Ceph RGW), HTTP (Express); recorded ${when}`;
    await writeFile(picture, timelineSvg(events, { subtitle, unfenced }));
    print(`timeline (SVG): ${picture}`);
    return ok ? 0 : 1;
  } finally {
    await metrics?.stop().catch(() => undefined);
    for (const h of holders) h.kill();
    await service?.close().catch(() => undefined);
    await admin.query(`drop table if exists ${table}`).catch(() => undefined);
    await admin.end().catch(() => undefined);
    await locks.close().catch(() => undefined);
  }
}

function seriesOf(message: HolderMessage): readonly DemoSeries[] {
  return Array.isArray(message.series) ? (message.series as DemoSeries[]) : [];
}
