// The fault-injection run, Jepsen-style: N worker processes
// (test/fixtures/fault-worker.mjs) loop acquire -> write PostgreSQL, S3 and an
// HTTP service with the token -> release, taking the lock from one token
// source (ZooKeeper, Redis, Redlock or etcd), while a nemesis
//   - SIGSTOPs workers past their session timeout or TTL (one of them right
//     after it was granted the lock, so it wakes up as a stale holder with
//     writes to do),
//   - injects the source's own faults (source-faults.ts): the ZooKeeper or
//     etcd leader SIGKILLed and restarted, the Redis primary killed and its
//     replica promoted, in sync or held back, a Redlock node restarted or
//     paused,
//   - cuts (RST) and black-holes workers' connections to the source's
//     servers: each worker reaches each of them through its own TcpProxy,
//     owned here,
//   - holds a PostgreSQL, S3 or HTTP write (HTTP unless httpCuts is off) in a
//     black hole from the moment it starts (S3: from its PUT), then resets
//     its connection, so the writer cannot know whether it landed (each
//     worker reaches these through its own proxies too).
// A fault is recorded only once it has taken effect, with its evidence: the
// process seen stopped, the connections a reset tore down, the victim's own
// report (its lock client lost its connection, its held write ended by the reset).
// The first of each kind above is promised: one that cannot be injected after
// a few tries is reported as missed, and the checker fails the run for it.
// Every write is recorded (invoke/complete with outcome and timestamps), and
// every grant with its token; the resources' apply orders are read at the
// end, and checker.ts judges them and the tokens.
//
// Used by fault-checker.test.ts (short run) and run-checker.ts (long run).
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import express from 'express';
import pg from 'pg';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  HeadObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { fencing, MemoryFenceStore } from '../../adapters/express/index.js';
import { migrate, PostgresFenceStore } from '../../adapters/postgres/index.js';
import type { FenceStore } from '../../src/index.js';
import { serve } from '../helpers/serve.js';
import type { TestServers } from '../helpers/server-env.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { uniqueBucket, uniqueId } from '../helpers/unique.js';
import {
  checkHistory,
  formatReport,
  type AppliedWrite,
  type CheckResult,
  type FaultRecord,
  type GrantRecord,
  type History,
  type Outcome,
  type RequiredFault,
  type Resource,
  type S3Attempt,
  type WriteRecord,
} from './checker.js';
import type { NemesisContext, SourceControl, SourceFaults } from './source-faults.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const WORKER = `${ROOT}test/fixtures/fault-worker.mjs`;
const DIST_ENTRIES = ['dist/src/index.js', 'dist/src/sources/zookeeper/index.js', 'dist/adapters/postgres/index.js', 'dist/adapters/s3/index.js'];

export interface RunOptions {
  readonly servers: TestServers;
  /** The token source and its own faults (source-faults.ts); the caller holds its fault turn. */
  readonly source: SourceControl;
  /** Worker processes (the suite runs 5). */
  readonly workers: number;
  /** Lock cycles after which the workers are told to stop (extended until the required faults are in). */
  readonly ops: number;
  /** Hard cap on the run, whatever the counts. */
  readonly maxDurationMs: number;
  /**
   * The grant's lifetime: the ZooKeeper session timeout (the ensemble's tick
   * 500 allows 1000..10000), the Redis key's TTL, the etcd lease (whole seconds).
   */
  readonly sessionTimeoutMs: number;
  /** After the required faults: keep injecting random faults until the end. */
  readonly randomFaults: boolean;
  /** Where the HTTP service keeps its fence. */
  readonly httpStore: 'memory' | 'postgres';
  /**
   * Also cut the workers' connections to the HTTP service (on by default).
   * These cuts once exposed fencing() rolling back the admission of a request
   * whose client hung up after the handler had written: a violation.
   */
  readonly httpCuts: boolean;
  /** Build dist/ first even if it exists (the script does; the test relies on npm test's build). */
  readonly build: boolean;
  readonly log: (line: string) => void;
}

export const DEFAULT_OPTIONS: Omit<RunOptions, 'servers' | 'source'> = {
  workers: 5,
  ops: 80,
  maxDurationMs: 120_000,
  sessionTimeoutMs: 2000,
  randomFaults: true,
  httpStore: 'memory',
  httpCuts: true,
  build: false,
  log: () => undefined,
};

export interface RunResult {
  readonly history: History;
  readonly result: CheckResult;
  readonly report: readonly string[];
  readonly names: { readonly lock: string; readonly table: string; readonly bucket: string; readonly key: string };
  /** Workers that died (or had to be killed) instead of stopping when told: a robustness bug, not a safety violation. */
  readonly crashes: readonly string[];
  /** Promised faults the nemesis could not inject, and why (also in history.missed, which fails the check). */
  readonly missed: readonly string[];
}

interface WorkerLine {
  readonly t: string;
  readonly ev?: string;
  readonly at: number;
  readonly worker: number;
  readonly [field: string]: unknown;
}

// --- dist ---------------------------------------------------------------------

function runTsc(): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [`${ROOT}node_modules/typescript/bin/tsc`, '-p', `${ROOT}tsconfig.build.json`], { cwd: ROOT, timeout: 300_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`building dist failed: ${error.message}\n${stdout}${stderr}`));
      else resolve();
    });
  });
}

/** Others run `npm run build` (rm -rf dist) at any time: build when asked or when an entry is missing. */
export async function ensureDist(force: boolean): Promise<void> {
  if (force || DIST_ENTRIES.some((entry) => !existsSync(ROOT + entry))) await runTsc();
}

// --- the run ----------------------------------------------------------------------

class WorkerProcess {
  readonly child: ChildProcess;
  readonly exited: Promise<void>;
  stderr = '';
  done = false;
  paused = false;
  ready = false;
  /** Its lock client's connection state as it last reported it (fault-worker.mjs). */
  zkState = 'connecting';
  /** How often its client reported losing the connection (left 'connected'). */
  suspensions = 0;
  constructor(readonly id: number, env: NodeJS.ProcessEnv, onLine: (line: WorkerLine) => void) {
    this.child = spawn(process.execPath, [WORKER], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.exited = once(this.child, 'exit').then(() => undefined);
    this.child.stdin?.on('error', () => undefined); // EPIPE from a worker that already exited
    this.child.stderr?.setEncoding('utf8').on('data', (text: string) => {
      this.stderr = (this.stderr + text).slice(-4000);
    });
    createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
      let line: WorkerLine;
      try {
        line = JSON.parse(text) as WorkerLine;
      } catch {
        return;
      }
      if (line.t === 'ready') this.ready = true;
      if (line.t === 'done') this.done = true;
      if (line.t === 'session') {
        const state = line.ev === 'new' ? 'connected' : line.ev === 'state' ? String(line.state) : this.zkState;
        if (this.zkState === 'connected' && state !== 'connected') this.suspensions += 1;
        this.zkState = state;
      }
      onLine(line);
    });
  }
  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }
  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }
  /** Ask the worker to finish its cycle and exit. */
  stop(): void {
    if (this.alive) this.child.stdin?.end('stop\n');
  }
}

interface HttpService {
  readonly url: string;
  readonly log: AppliedWrite[];
  close(): Promise<void>;
}

async function startHttpService(resource: string, store: FenceStore<unknown>): Promise<HttpService> {
  const log: AppliedWrite[] = [];
  const app = express();
  app.put('/faults/resource', fencing({ store, resource }), express.json(), (req, res) => {
    const writeId = (req.body as { writeId?: unknown } | undefined)?.writeId;
    if (typeof writeId !== 'string' || req.fencing === undefined) {
      res.status(400).end();
      return;
    }
    // Inside the fence: fencing() holds it until this response has finished,
    // so the order of this log is the order the service applied the writes.
    log.push({ id: writeId, token: req.fencing.token });
    res.status(204).end();
  });
  const { server, port, close } = await serve(app);
  // The workers' fetch keeps its connections alive: idle ones stay a minute, not Node's default 5 s.
  server.keepAliveTimeout = 60_000;
  return { url: `http://127.0.0.1:${port}/faults/resource`, log, close };
}

/** The state letter of /proc/PID/stat (R, S, T for stopped, Z...), or null when the process is gone. */
function processState(pid: number | undefined): string | null {
  if (pid === undefined) return null;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // after the parenthesised command name, which may itself contain ') '
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) || null;
  } catch {
    return null;
  }
}

const random = (min: number, max: number): number => min + Math.random() * (max - min);
const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(Math.random() * items.length)];

export async function runFaultCheck(partial: Partial<RunOptions> & Pick<RunOptions, 'servers' | 'source'>): Promise<RunResult> {
  const options: RunOptions = { ...DEFAULT_OPTIONS, ...partial };
  const { log, servers } = options;
  const run = uniqueId('faults');
  const names = { lock: `faults/${run}`, table: run, bucket: uniqueBucket('fk-faults'), key: `${run}/object.json` };
  const historyTable = `${run}_history`;
  const stateTable = `${run}_state`;

  const admin = new pg.Pool({ connectionString: servers.databaseUrl, max: 3 });
  admin.on('error', () => undefined);
  const s3 = new S3Client({ endpoint: servers.s3.endpoint, region: servers.s3.region, forcePathStyle: true, credentials: servers.s3.credentials });
  const proxies: TcpProxy[][] = [];
  const resourceProxies: { postgres: TcpProxy; s3: TcpProxy; http: TcpProxy }[] = [];
  const workers: WorkerProcess[] = [];
  let service: HttpService | null = null;
  let httpStore: FenceStore<unknown> | null = null;
  let source: SourceFaults | null = null;

  // What the run records.
  const writes = new Map<string, { invoke: WorkerLine; complete?: WorkerLine; sent: S3Attempt[] }>();
  const faults: FaultRecord[] = [];
  const missed: string[] = [];
  let required: readonly RequiredFault[] = [];
  const cycles = { invoked: 0, completed: 0, acquireFailed: 0 };
  const cycleStarts = new Map<string, number>();
  const grants: GrantRecord[] = [];
  let staleRefused = 0;
  let pauseHolder: ((worker: WorkerProcess, token: string) => void) | null = null;
  /**
   * Armed by the nemesis: black-hole the next write to `resource` as it
   * starts; for s3, as its PUT goes on the wire (the HEAD before it would
   * only be retried), so what is held is the PUT or its reply.
   */
  let holdNextWrite: { readonly resource: Resource; readonly hit: (worker: number, id: string) => void } | null = null;
  const hold = (resource: Resource, worker: number, id: string): void => {
    if (holdNextWrite === null || holdNextWrite.resource !== resource) return;
    const own = resourceProxies[worker];
    if (own === undefined) return;
    own[resource].blackhole(); // in the line handler: the write (or the PUT) is just starting
    const { hit } = holdNextWrite;
    holdNextWrite = null;
    hit(worker, id);
  };
  const started = Date.now();
  const since = (): string => `t+${((Date.now() - started) / 1000).toFixed(1)}s`;

  const onLine = (line: WorkerLine): void => {
    if (line.t === 'cycle') {
      const cycle = String(line.cycle);
      if (line.ev === 'invoke') {
        cycles.invoked += 1;
        cycleStarts.set(cycle, line.at);
      } else if (line.ev === 'complete') cycles.completed += 1;
      else if (line.ev === 'fail') cycles.acquireFailed += 1;
      else if (line.ev === 'acquired') {
        grants.push({ worker: line.worker, cycle, token: BigInt(String(line.token)), invokedAt: cycleStarts.get(cycle) ?? line.at, grantedAt: line.at });
      }
      if (line.ev === 'acquired' && pauseHolder !== null) {
        // SIGSTOP right here, in the line handler: the worker is between its
        // grant and its first write (a think time of 5+ ms).
        const w = workers[line.worker];
        if (w !== undefined && !w.paused && w.alive) {
          w.signal('SIGSTOP');
          w.paused = true;
          const resolve = pauseHolder;
          pauseHolder = null;
          resolve(w, String(line.token));
        }
      }
    } else if (line.t === 'write') {
      const id = String(line.id);
      if (line.ev === 'invoke') {
        writes.set(id, { invoke: line, sent: [] });
        if (line.resource !== 's3') hold(line.resource as Resource, line.worker, id);
      } else if (line.ev === 'complete') {
        const entry = writes.get(id);
        if (entry !== undefined) entry.complete = line;
        if (line.outcome === 'refused') staleRefused += 1;
      }
    } else if (line.t === 's3-attempt') {
      // Sent, outcome not yet known: what an s3 write killed in flight leaves.
      writes.get(String(line.id))?.sent.push({ precondition: line.precondition === null ? null : String(line.precondition), status: null });
      hold('s3', line.worker, String(line.id));
    } else if (line.t === 'error') {
      log(`${since()} worker ${line.worker} failed: ${String(line.detail)}`);
    }
  };

  try {
    await ensureDist(options.build);
    await migrate(admin);
    await admin.query(`create table ${historyTable} (seq bigserial primary key, write_id text not null, token bigint not null, worker int not null, applied_at timestamptz not null default clock_timestamp())`);
    await admin.query(`create table ${stateTable} (id int primary key, write_id text not null, token bigint not null)`);
    await s3.send(new CreateBucketCommand({ Bucket: names.bucket }));
    const store: FenceStore<unknown> = options.httpStore === 'postgres' ? new PostgresFenceStore(admin) : new MemoryFenceStore();
    httpStore = store;
    service = await startHttpService(`faults/${run}/http`, store);
    source = await options.source.faults(servers, names.lock);
    const endpoints = source.endpoints;

    const viaProxy = (url: string, proxy: TcpProxy): string => {
      const rewritten = new URL(url);
      rewritten.host = proxy.address;
      return rewritten.toString();
    };
    const hostPortOf = (url: string): string => {
      const parsed = new URL(url);
      return `${parsed.hostname}:${parsed.port === '' ? (parsed.protocol === 'https:' ? '443' : parsed.protocol === 'http:' ? '80' : '5432') : parsed.port}`;
    };
    for (let i = 0; i < options.workers; i++) {
      proxies.push(await Promise.all(endpoints.map((hostPort) => TcpProxy.to(hostPort))));
      resourceProxies.push({
        postgres: await TcpProxy.to(hostPortOf(servers.databaseUrl)),
        s3: await TcpProxy.to(hostPortOf(servers.s3.endpoint)),
        http: await TcpProxy.to(hostPortOf(service.url)),
      });
    }
    const envFor = (i: number): NodeJS.ProcessEnv => ({
      ...process.env,
      FK_WORKER: String(i),
      FK_SOURCE: options.source.kind,
      FK_CONNECT: (proxies[i] ?? []).map((p) => p.address).join(','),
      FK_LOCK: names.lock,
      FK_SESSION_MS: String(options.sessionTimeoutMs),
      DATABASE_URL: viaProxy(servers.databaseUrl, (resourceProxies[i] as { postgres: TcpProxy }).postgres),
      FK_PG_RESOURCE: `faults/${run}/postgres`,
      FK_PG_HISTORY: historyTable,
      FK_PG_STATE: stateTable,
      S3_ENDPOINT: viaProxy(servers.s3.endpoint, (resourceProxies[i] as { s3: TcpProxy }).s3).replace(/\/$/, ''),
      S3_REGION: servers.s3.region,
      S3_ACCESS_KEY: servers.s3.credentials.accessKeyId,
      S3_SECRET_KEY: servers.s3.credentials.secretAccessKey,
      FK_BUCKET: names.bucket,
      FK_KEY: names.key,
      FK_HTTP_URL: viaProxy(service?.url ?? '', (resourceProxies[i] as { http: TcpProxy }).http),
      FK_THINK_MS: '30',
    });

    // Spawn and wait until every worker has a session. A worker that dies
    // before that because dist vanished under it (someone's `npm run build`)
    // is spawned again after a rebuild.
    for (let attempt = 1; ; attempt++) {
      for (let i = 0; i < options.workers; i++) {
        const existing = workers[i];
        if (existing === undefined || (!existing.alive && !existing.ready)) workers[i] = new WorkerProcess(i, envFor(i), onLine);
      }
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && workers.some((w) => !w.ready && w.alive)) await sleep(50);
      const dead = workers.filter((w) => !w.ready);
      if (dead.length === 0) break;
      const why = dead.map((w) => `worker ${w.id}: ${w.alive ? 'not ready after 60 s' : w.stderr.trim().slice(-600)}`).join('\n');
      if (attempt >= 3 || !/ERR_MODULE_NOT_FOUND|Cannot find module/.test(why)) throw new Error(`workers did not start:\n${why}`);
      log(`${since()} dist vanished under the workers; rebuilding`);
      for (const w of dead) w.signal('SIGKILL');
      await ensureDist(true);
    }
    log(`${since()} ${options.workers} workers ready (${source.kind} lock ${names.lock}, table ${historyTable}, s3://${names.bucket}/${names.key}, http ${options.httpStore} store)`);

    // --- the nemesis ----------------------------------------------------------------
    // Every fault function returns null once the fault has taken effect (and
    // is recorded), or why it could not be injected: a fault is recorded only
    // with the evidence that it happened, and a promised one that cannot be
    // injected is reported, never skipped in silence.
    const record = (fault: FaultRecord): void => {
      faults.push(fault);
      log(`${since()} fault ${fault.kind} ${fault.target}: ${fault.detail ?? ''}`);
    };
    const session = options.sessionTimeoutMs;
    const sourceFaults = source;
    const { kind } = sourceFaults;
    const running = (): WorkerProcess[] => workers.filter((w) => w.alive && !w.paused);
    const stopRun = new AbortController();
    const stopping = (): boolean => stopRun.signal.aborted;
    /** Sleep, cut short when the run stops. */
    const wait = (ms: number): Promise<void> => sleep(ms, undefined, { signal: stopRun.signal }).catch(() => undefined);
    /** Poll `condition` until it holds (true) or `ms` pass or the run stops (false). */
    const until = async (condition: () => boolean, ms: number): Promise<boolean> => {
      const end = performance.now() + ms;
      while (!condition()) {
        if (stopping() || performance.now() > end) return condition();
        await wait(10);
      }
      return true;
    };
    /** SIGSTOP has taken effect: the kernel shows the process stopped (state T). */
    const seenStopped = (w: WorkerProcess): Promise<boolean> => until(() => processState(w.child.pid) === 'T', 2000);

    const pauseFor = async (w: WorkerProcess, ms: number): Promise<void> => {
      await wait(ms);
      w.signal('SIGCONT');
      w.paused = false;
    };
    const faultPauseHolder = async (): Promise<string | null> => {
      const granted = new Promise<{ w: WorkerProcess; token: string }>((resolve) => {
        pauseHolder = (w, token) => resolve({ w, token });
      });
      const got = await Promise.race([granted, wait(20_000).then(() => null)]);
      pauseHolder = null;
      if (got === null) return stopping() ? 'the run ended first' : 'no worker was granted the lock within 20 s';
      const ms = Math.round(session * 2);
      const noticed = await seenStopped(got.w);
      record({
        kind: 'pause',
        target: `worker ${got.w.id}`,
        at: Date.now(),
        token: BigInt(got.token),
        noticed,
        detail: `SIGSTOP right after its grant (token ${got.token}) for ${ms} ms (session ${session} ms)${noticed ? '' : '; the process was never seen stopped'}`,
      });
      await pauseFor(got.w, ms);
      return null;
    };
    const faultPauseRandom = async (): Promise<string | null> => {
      const w = pick(running());
      if (w === undefined) return 'no worker running';
      const ms = Math.round(random(0.5, 2.2) * session);
      w.signal('SIGSTOP');
      w.paused = true;
      const noticed = await seenStopped(w);
      record({
        kind: 'pause',
        target: `worker ${w.id}`,
        at: Date.now(),
        noticed,
        detail: `SIGSTOP for ${ms} ms (${ms > session ? 'past' : 'within'} its session)${noticed ? '' : '; the process was never seen stopped'}`,
      });
      await pauseFor(w, ms);
      return null;
    };
    const zkOpen = (w: WorkerProcess): number => (proxies[w.id] ?? []).reduce((n, p) => n + p.connectionCount, 0);
    const faultCut = async (): Promise<string | null> => {
      // Only a connected client through an open connection can be cut.
      const w = pick(running().filter((c) => c.zkState === 'connected' && zkOpen(c) > 0));
      if (w === undefined) return `no running worker had its ${kind} client connected through its proxies`;
      const open = zkOpen(w);
      const suspensions = w.suspensions;
      const at = Date.now();
      for (const p of proxies[w.id] ?? []) p.cut();
      // The victim's view: its client saw the connection go (and suspended).
      const noticed = await until(() => w.suspensions > suspensions, 10_000);
      record({
        kind: 'cut',
        target: `worker ${w.id}`,
        at,
        connections: open,
        noticed,
        detail: `TCP RST on its ${kind} connections (${open} open)${noticed ? '' : '; its client never reported the loss'}`,
      });
      return null;
    };
    const faultPartition = async (): Promise<string | null> => {
      const w = pick(running());
      if (w === undefined) return 'no worker running';
      const ms = Math.round(random(0.5, 2) * session);
      for (const p of proxies[w.id] ?? []) p.blackhole();
      record({ kind: 'partition', target: `worker ${w.id}`, at: Date.now(), detail: `black hole on its ${kind} connections (${zkOpen(w)} open) for ${ms} ms` });
      await wait(ms);
      for (const p of proxies[w.id] ?? []) p.resume();
      return null;
    };
    // Hold one write in flight (its request, or its reply, sits in the proxy),
    // then reset the connection: the writer cannot know whether it landed.
    const cuttable: readonly Resource[] = options.httpCuts ? ['postgres', 's3', 'http'] : ['postgres', 's3'];
    const faultResourceCut = async (resource: Resource): Promise<string | null> => {
      const hit = new Promise<{ worker: number; id: string }>((resolve) => {
        holdNextWrite = { resource, hit: (worker, id) => resolve({ worker, id }) };
      });
      const got = await Promise.race([hit, wait(20_000).then(() => null)]);
      holdNextWrite = null;
      if (got === null) return stopping() ? 'the run ended first' : `no ${resource} write started within 20 s`;
      const proxy = resourceProxies[got.worker]?.[resource];
      if (proxy === undefined) return `worker ${got.worker} has no ${resource} proxy`;
      const ms = Math.round(random(200, 1500));
      await wait(ms);
      const entry = writes.get(got.id);
      const open = proxy.connectionCount;
      // A write that finished before the black hole took hold was not held.
      if (entry === undefined || entry.complete !== undefined || open === 0 || stopping()) {
        proxy.resume();
        if (stopping()) return 'the run ended first';
        return entry?.complete !== undefined
          ? `write ${got.id} finished (${String(entry.complete.outcome)}) before its connection was held`
          : `write ${got.id} had no ${resource} connection open to reset`;
      }
      const at = Date.now();
      proxy.cut();
      proxy.resume();
      // The victim's view: the held write ends now that its connection is
      // gone, and it shows: a PostgreSQL transaction or an HTTP request dies
      // with its connection (no acknowledgement); an S3 write has a PUT
      // without a reply (the adapter then reads the object back).
      const completion = (): WorkerLine | undefined => writes.get(got.id)?.complete;
      const ended = await until(() => completion() !== undefined, 30_000);
      const end = completion();
      const attempts = (end?.attempts ?? []) as readonly S3Attempt[];
      const shows = end !== undefined && (resource === 's3' ? attempts.some((a) => a.status === null) : end.outcome !== 'ok');
      const outcome = end === undefined ? '' : `${String(end.outcome)}${end.detail === undefined ? '' : ` (${String(end.detail).slice(0, 80)})`}`;
      record({
        kind: 'resource-cut',
        target: `worker ${got.worker}`,
        at,
        resource,
        write: got.id,
        connections: open,
        noticed: shows,
        detail:
          `${resource} traffic held from the start of ${resource === 's3' ? 'the PUT of ' : ''}write ${got.id} for ${ms} ms, then RST of ${open} connection(s); ` +
          (!ended
            ? 'the write never ended'
            : resource === 's3'
              ? `${shows ? 'a PUT lost its reply' : 'no PUT lost its reply'}; the write ended ${outcome}`
              : `the write ended ${outcome}${shows ? '' : ', as if nothing had happened'}`),
      });
      return null;
    };
    // The source's own faults (source-faults.ts) get what they need of the run.
    const nemesisContext: NemesisContext = {
      record,
      wait,
      stopping,
      log: (line) => log(`${since()} ${line}`),
      grants: () => grants.length,
      sessionMs: session,
    };

    // The guaranteed schedule: a stale holder, a cut, a leader kill, and a
    // held-then-reset write through each resource. Each is tried a few times;
    // one that still cannot be injected is reported (missed), and the checker
    // fails the run for it.
    const schedule: readonly (RequiredFault & { readonly name: string; readonly inject: () => Promise<string | null> })[] = [
      { kind: 'pause', freshHolder: true, name: 'a pause of a fresh lock holder', inject: faultPauseHolder },
      { kind: 'cut', name: `a cut of a worker's ${kind} connections`, inject: faultCut },
      ...sourceFaults.required.map((f) => ({ kind: f.kind, ...(f.variant === undefined ? {} : { variant: f.variant }), name: f.name, inject: () => f.inject(nemesisContext) })),
      ...cuttable.map((resource) => ({ kind: 'resource-cut' as const, resource, name: `a held-then-reset ${resource} write`, inject: () => faultResourceCut(resource) })),
    ];
    required = schedule.map(({ kind, resource, freshHolder, variant, name }) => ({
      kind,
      name,
      ...(resource === undefined ? {} : { resource }),
      ...(freshHolder === undefined ? {} : { freshHolder }),
      ...(variant === undefined ? {} : { variant }),
    }));
    const attemptsPerFault = 3;
    let requiredDone = false;
    let gaveUp = false;
    const nemesis = (async () => {
      // warm-up: let every worker get through a cycle or so
      while (!stopping() && cycles.completed < Math.min(options.workers, 5)) await wait(50);
      for (const step of schedule) {
        for (let attempt = 1; ; attempt++) {
          const why = stopping() ? 'the run ended first' : await step.inject();
          if (why === null) break;
          log(`${since()} could not inject ${step.name} (attempt ${attempt} of ${attemptsPerFault}): ${why}`);
          if (attempt >= attemptsPerFault || stopping()) {
            missed.push(`${step.name}: ${why}`);
            break;
          }
          await wait(random(300, 800));
        }
        await wait(random(300, 800));
      }
      requiredDone = true;
      let holderTries = 1;
      while (!stopping()) {
        await wait(random(300, 1200));
        if (stopping()) break;
        if (staleRefused === 0) {
          if (holderTries >= 5) {
            gaveUp = true;
            break;
          }
          holderTries += 1;
          await faultPauseHolder();
          continue;
        }
        if (!options.randomFaults) break;
        const dice = Math.random();
        const why =
          dice < 0.25 ? await faultPauseRandom()
          : dice < 0.4 ? await faultPauseHolder()
          : dice < 0.55 ? await faultCut()
          : dice < 0.7 ? await faultPartition()
          : dice < 0.85 ? await faultResourceCut(pick(cuttable) as Resource)
          : await (pick(sourceFaults.random) as (typeof sourceFaults.random)[number]).inject(nemesisContext);
        if (why !== null && !stopping()) log(`${since()} random fault not injected: ${why}`);
      }
    })();
    const nemesisDone = nemesis.then(
      () => undefined,
      (error: unknown) => {
        log(`${since()} nemesis failed: ${String(error)}`);
        throw error;
      },
    );

    // --- until the budget is spent ----------------------------------------------
    const deadline = started + options.maxDurationMs;
    let lastReport = Date.now();
    let nemesisFinished = false;
    void nemesisDone.finally(() => {
      nemesisFinished = true;
    }).catch(() => undefined);
    while (Date.now() < deadline) {
      const budgetSpent = cycles.invoked >= options.ops;
      const proved = requiredDone && (staleRefused > 0 || gaveUp);
      if ((budgetSpent && proved) || (nemesisFinished && !options.randomFaults && budgetSpent)) break;
      if (workers.every((w) => !w.alive)) break;
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        log(`${since()} cycles ${cycles.invoked} invoked / ${cycles.completed} completed / ${cycles.acquireFailed} acquire failed; ${writes.size} writes; ${staleRefused} stale refused; ${faults.length} faults`);
      }
      await sleep(100);
    }
    stopRun.abort();
    pauseHolder = null;
    holdNextWrite = null;
    await nemesisDone;

    // --- heal and stop ------------------------------------------------------------
    for (const list of proxies) for (const p of list) p.resume();
    for (const own of resourceProxies) for (const p of Object.values(own)) p.resume();
    for (const w of workers) {
      if (w.paused) {
        w.signal('SIGCONT');
        w.paused = false;
      }
      w.stop();
    }
    const exited = Promise.all(workers.map((w) => w.exited));
    if ((await Promise.race([exited.then(() => true), sleep(45_000).then(() => false)])) === false) {
      log(`${since()} workers still running 45 s after stop: SIGKILL (their writes in flight stay unknown)`);
      for (const w of workers) w.signal('SIGKILL');
      await exited;
    }
    const crashes: string[] = [];
    for (const w of workers) {
      if (w.done) continue;
      crashes.push(`worker ${w.id} ended without 'done' (exit ${String(w.child.exitCode ?? w.child.signalCode)}): ${w.stderr.trim().slice(-1500)}`);
      log(`${since()} ${crashes[crashes.length - 1] ?? ''}`);
    }
    log(`${since()} workers stopped; reading the resources`);

    // --- the evidence -----------------------------------------------------------
    const history = await collect();
    const result = checkHistory(history);
    const report = [...formatReport(result, history), `worker crashes: ${crashes.length}`];
    return { history, result, report, names, crashes, missed: [...missed] };
  } finally {
    pauseHolder = null;
    for (const w of workers) {
      w.signal('SIGCONT');
      w.signal('SIGKILL');
    }
    await Promise.all(workers.map((w) => w.exited));
    await Promise.all([...proxies.flat(), ...resourceProxies.flatMap((own) => Object.values(own))].map((p) => p.close()));
    await service?.close().catch(() => undefined);
    await admin.query(`drop table if exists ${historyTable}, ${stateTable}`).catch(() => undefined);
    await admin.query('delete from fencekeeper_fences where resource like $1', [`faults/${run}/%`]).catch(() => undefined);
    await s3.send(new DeleteObjectCommand({ Bucket: names.bucket, Key: names.key })).catch(() => undefined);
    await s3.send(new DeleteBucketCommand({ Bucket: names.bucket })).catch(() => undefined);
    s3.destroy();
    await admin.end().catch(() => undefined);
    await source?.close().catch(() => undefined);
  }

  async function collect(): Promise<History> {
    const records: WriteRecord[] = [];
    for (const [id, { invoke, complete, sent }] of writes) {
      const resource = String(invoke.resource) as Resource;
      const outcome: Outcome = complete === undefined ? 'unknown' : (String(complete.outcome) as Outcome);
      const record: WriteRecord = {
        id,
        worker: invoke.worker,
        resource,
        token: BigInt(String(invoke.token)),
        invokedAt: invoke.at,
        completedAt: complete?.at ?? null,
        outcome,
        ...(complete?.detail === undefined ? {} : { detail: String(complete.detail) }),
        ...(resource === 's3'
          ? { s3: { etag: String(invoke.etag), attempts: complete === undefined ? sent : (complete.attempts as S3Attempt[]) } }
          : {}),
      };
      records.push(record);
    }
    // An s3 write that never reported back (killed in flight) keeps the PUTs
    // it reported as sent, each with an unknown outcome.
    const pgRows = await admin.query<{ write_id: string; token: string }>(`select write_id, token::text as token from ${historyTable} order by seq`);
    const pgState = await admin.query<{ write_id: string; token: string }>(`select write_id, token::text as token from ${stateTable} where id = 1`);
    const stateRow = pgState.rows[0];
    const pgFence = await admin.query<{ token: string }>('select token::text as token from fencekeeper_fences where resource = $1', [`faults/${run}/postgres`]);
    const pgFenceRow = pgFence.rows[0];
    const httpFence = httpStore === null ? null : await httpStore.current(`faults/${run}/http`);
    let s3Final: { etag: string; writeId: string; token: bigint | null } | null = null;
    try {
      const head = await s3.send(new HeadObjectCommand({ Bucket: names.bucket, Key: names.key }));
      const token = head.Metadata?.['fencing-token'];
      s3Final = {
        etag: (head.ETag ?? '').replace(/^"|"$/g, ''),
        writeId: head.Metadata?.['fault-write-id'] ?? '',
        token: token === undefined ? null : BigInt(token),
      };
    } catch (error) {
      if ((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode !== 404) throw error;
    }
    const httpLog = service?.log ?? [];
    const resources: History['resources'] = {
      postgres: {
        applied: pgRows.rows.map((r) => ({ id: r.write_id, token: BigInt(r.token) })),
        final: stateRow === undefined ? null : { id: stateRow.write_id, token: BigInt(stateRow.token) },
        fence: pgFenceRow === undefined ? null : BigInt(pgFenceRow.token),
      },
      http: { applied: [...httpLog], final: httpLog[httpLog.length - 1] ?? null, fence: httpFence },
      s3: { final: null, s3Final },
    };
    return {
      writes: records,
      resources,
      faults,
      cycles: { ...cycles, unfinished: cycles.invoked - cycles.completed - cycles.acquireFailed },
      grants: [...grants],
      required,
      missed,
    };
  }
}
