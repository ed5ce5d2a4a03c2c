// Each token source's own faults for the fault-injection run (harness.ts),
// driven through the project's server scripts (test/servers/*.sh), and the
// cross-process fault turn a run takes before it breaks shared nodes:
//   zookeeper  SIGKILL the leader of the 3-node ensemble, restart it
//              (zk-ensemble.sh; the turn of test/helpers/ensemble-lock.ts)
//   etcd       SIGKILL the leader of the 3-node cluster, restart it with its
//              data (etcd.sh kill-leader / restart, on FK_ETCD_CLUSTER)
//   redis      the single-instance lock on the primary of FK_REDIS_PAIR:
//              SIGKILL the primary, promote its replica, move the workers'
//              address to it (FloatingAddress), then bring the old primary
//              back as the new one's replica. The replica replicates through
//              a proxy of ours, so its lag can be made: once the failover
//              comes with the replica in sync, once with replication held in
//              a black hole while grants are made (dropped with the
//              connection at the kill), which is the asynchronous
//              replication lag that loses the last INCRs of the token
//              counter: the checker must then report token regressions.
//              (A SIGSTOPped replica would not do: the kernel keeps what the
//              primary sent in its socket buffer and hands it over on SIGCONT.)
//   redlock    restart one of the five nodes from its AOF (redis.sh restart N),
//              SIGSTOP one for a while; one node at a time, never a majority.
//   postgres   postgresSource on a PostgreSQL cluster the checker owns
//              (test/servers/pg-replica.sh on ports 25451/25452, apart from
//              the compare's pair and never the shared server): its primary
//              SIGKILLed (postmaster and backends) and started again, crash
//              recovery and all. Connection cuts and paused holders come
//              from the harness, as for every source.
// A fault is recorded only after the script reported it done, with what it
// changed (the pid before and after, the counter on either side of a
// failover); one that cannot be injected returns why, and the harness
// counts it as missed if it was promised.
//
// Plain Node (no 'vitest' import): run-checker.ts uses it too. The scripts'
// paths come from the environment the global setup fills in.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { migrate } from '../../adapters/postgres/index.js';
import { performance } from 'node:perf_hooks';
import { Redis } from 'ioredis';
import { lockKeys } from '../../src/sources/redis/scripts.js';
import { holdEnsembleForFaults } from '../helpers/ensemble-lock.js';
import { healedTurn, scriptTurn } from '../helpers/fault-turn.js';
import { SERVER_ENV, type ProvidedServers, type TestServers } from '../helpers/server-env.js';
import type { FaultKind, FaultRecord } from './checker.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { FloatingAddress } from './floating-address.js';

export const SOURCE_KINDS = ['zookeeper', 'redis', 'redlock', 'etcd', 'postgres'] as const;
export type SourceKind = (typeof SOURCE_KINDS)[number];

export function isSourceKind(text: string): text is SourceKind {
  return (SOURCE_KINDS as readonly string[]).includes(text);
}

/** What a source's fault gets from the harness. */
export interface NemesisContext {
  record(fault: FaultRecord): void;
  /** Sleep, cut short when the run stops. */
  wait(ms: number): Promise<void>;
  stopping(): boolean;
  log(line: string): void;
  /** Lock grants the workers reported so far. */
  grants(): number;
  /** The grant's lifetime without renewals (session timeout, TTL, lease), ms. */
  readonly sessionMs: number;
}

export interface ServerFault {
  readonly kind: FaultKind;
  /** Which form of the kind, where a source has more than one (the failover with the replica held back). */
  readonly variant?: string;
  /** For the log and the missed list: "a kill of the etcd leader". */
  readonly name: string;
  /** null once injected and recorded; otherwise why not (nothing was changed, or it was undone). */
  inject(ctx: NemesisContext): Promise<string | null>;
}

export interface SourceFaults {
  readonly kind: SourceKind;
  /** 'host:port' of each server a worker talks to: every worker reaches each through a proxy of its own. */
  readonly endpoints: readonly string[];
  /** The source's faults the run promises, in this order. */
  readonly required: readonly ServerFault[];
  /** What the random phase draws the source's faults from. */
  readonly random: readonly ServerFault[];
  /** Stop what this object started; the nodes are restored by the turn's release. */
  close(): Promise<void>;
}

export interface SourceControl {
  readonly kind: SourceKind;
  /**
   * Take the servers' fault turn (waiting for other fault tests and runs) and
   * wait until they are healthy. The release restores every node (restart,
   * resume, re-pair), then gives the turn back.
   */
  hold(): Promise<() => Promise<void>>;
  /** The faults of one run on lock `lockName`. */
  faults(servers: TestServers, lockName: string): Promise<SourceFaults>;
}

const random = (min: number, max: number): number => min + Math.random() * (max - min);
const hostPort = (url: string): string => new URL(url).host;

function scriptPath(key: keyof ProvidedServers, env: NodeJS.ProcessEnv): string {
  const path = env[SERVER_ENV[key]];
  if (path === undefined || path === '') throw new Error(`${SERVER_ENV[key]} is not set: the servers of this run cannot be driven (the global setup sets it when it starts or finds them)`);
  return path;
}

/** `bash script args...` as this process (FK_USER_PID: the fault turn is ours); stdout and the script's log lines. */
function runner(script: string): (...args: string[]) => Promise<{ stdout: string; stderr: string }> {
  return (...args) =>
    new Promise((resolve, reject) => {
      execFile('bash', [script, ...args], { timeout: 660_000, env: { ...process.env, FK_USER_PID: String(process.pid) } }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${script} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
        else resolve({ stdout: stdout.trim(), stderr: stderr.trim() });
      });
    });
}

/** One command to the Redis node on `port`, on a connection of its own (null: no answer). */
async function redisCommand(port: number, command: string, ...args: (string | number)[]): Promise<unknown> {
  const client = new Redis({ host: '127.0.0.1', port, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 2000, commandTimeout: 2000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return await client.call(command, args);
  } finally {
    client.disconnect();
  }
}

async function poll(condition: () => Promise<boolean>, ms: number): Promise<boolean> {
  const end = performance.now() + ms;
  for (;;) {
    if (await condition().catch(() => false)) return true;
    if (performance.now() > end) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function sourceControl(kind: SourceKind, env: NodeJS.ProcessEnv = process.env): SourceControl {
  switch (kind) {
    case 'zookeeper':
      return zookeeperControl(runner(scriptPath('zkEnsembleCtl', env)));
    case 'etcd':
      return etcdControl(runner(scriptPath('etcdCtl', env)));
    case 'redis':
    case 'redlock':
      return redisControl(kind, runner(scriptPath('redisCtl', env)));
    case 'postgres':
      return postgresControl();
  }
}

// --- PostgreSQL -----------------------------------------------------------------------

/** The checker's own cluster: pg-replica.sh on its own ports (the compare's pair is 25441). */
const PG_CHECKER_PORT = 25451;

function postgresControl(): SourceControl {
  const script = fileURLToPath(new URL('../servers/pg-replica.sh', import.meta.url));
  const base = runner(script);
  const ctl = (...args: string[]): Promise<{ stdout: string; stderr: string }> => {
    process.env.FK_PG_REPLICA_PORT = String(PG_CHECKER_PORT);
    return base(...args);
  };
  const primary = `127.0.0.1:${PG_CHECKER_PORT}`;
  const postmasterPid = async (): Promise<number | null> => {
    const client = new pg.Client({ connectionString: `postgres://root@${primary}/test`, connectionTimeoutMillis: 2000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      // The postmaster is the parent of every backend.
      const { rows } = await client.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE backend_type = $1 LIMIT 1', ['checkpointer']);
      const child = rows[0]?.pid;
      if (child === undefined) return null;
      const stat = readFileSync(`/proc/${child}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    } catch {
      return null;
    } finally {
      await client.end().catch(() => undefined);
    }
  };
  const restartPrimary: ServerFault = {
    kind: 'node-restart',
    name: 'a crash and restart of the PostgreSQL primary',
    async inject(ctx) {
      const before = await postmasterPid();
      if (before === null) return 'the primary did not answer before the fault';
      const killed = Number((await ctl('kill-primary')).stdout.split('\n').at(-1));
      if (killed !== before) return `the script killed pid ${killed}, not the postmaster ${before}`;
      await ctx.wait(random(300, 1000));
      await ctl('restart-primary');
      const after = await postmasterPid();
      if (after === null || after === before) return `the primary answers with postmaster ${String(after)} after the restart`;
      ctx.record({ kind: 'node-restart', target: `postgres primary ${primary}`, at: Date.now(), detail: `SIGKILL of postmaster ${before} and its backends, started again (crash recovery) as ${after}` });
      ctx.log(`postgres primary restarted (postmaster ${before} -> ${after})`);
      return null;
    },
  };
  return {
    kind: 'postgres',
    async hold() {
      // A cluster of this run's own: nobody else breaks it, so the turn is only its start and stop.
      await ctl('acquire');
      const pool = new pg.Pool({ connectionString: `postgres://root@${primary}/test`, max: 1 });
      try {
        await migrate(pool);
      } finally {
        await pool.end();
      }
      return async () => {
        await ctl('reset').catch(() => undefined);
        await ctl('release');
      };
    },
    async faults() {
      return { kind: 'postgres', endpoints: [primary], required: [restartPrimary], random: [restartPrimary], close: async () => undefined };
    },
  };
}

// --- ZooKeeper ----------------------------------------------------------------------

function zookeeperControl(ctl: ReturnType<typeof runner>): SourceControl {
  const killLeader: ServerFault = {
    kind: 'kill-leader',
    name: 'a kill of the ZooKeeper leader',
    async inject(ctx) {
      const { stdout } = await ctl('kill-leader');
      const id = Number(stdout);
      if (![1, 2, 3].includes(id)) throw new Error(`zk-ensemble.sh kill-leader printed ${JSON.stringify(stdout)}`);
      ctx.record({ kind: 'kill-leader', target: `zookeeper node ${id}`, at: Date.now(), detail: 'SIGKILL' });
      await new Promise((r) => setTimeout(r, random(500, 1500)));
      await ctl('start-node', String(id));
      ctx.log(`zookeeper node ${id} restarted`);
      return null;
    },
  };
  return {
    kind: 'zookeeper',
    async hold() {
      // The ensemble's turn predates the scripts' hold-faults: a directory lock other ZooKeeper fault files take too.
      return healedTurn(holdEnsembleForFaults, () => ctl('wait-healthy', '60'), async () => {
        for (const n of [1, 2, 3]) await ctl('start-node', String(n));
        await ctl('wait-healthy', '60');
      });
    },
    async faults(servers) {
      return { kind: 'zookeeper', endpoints: servers.zkEnsemble.split(','), required: [killLeader], random: [killLeader], close: async () => undefined };
    },
  };
}

// --- etcd ---------------------------------------------------------------------------

function etcdControl(ctl: ReturnType<typeof runner>): SourceControl {
  const killLeader: ServerFault = {
    kind: 'kill-leader',
    name: 'a kill of the etcd leader',
    async inject(ctx) {
      const { stdout, stderr } = await ctl('kill-leader');
      const id = Number(stdout);
      if (![1, 2, 3].includes(id)) throw new Error(`etcd.sh kill-leader printed ${JSON.stringify(stdout)}`);
      ctx.record({ kind: 'kill-leader', target: `etcd node ${id}`, at: Date.now(), detail: `SIGKILL (${stderr.split('\n').pop() ?? ''})` });
      await new Promise((r) => setTimeout(r, random(500, 1500)));
      try {
        await ctl('restart', String(id));
      } catch (error) {
        // etcd.sh restart can take the node for gone when it looks between
        // the fork and the exec of etcd (seen at load 14); heal starts it if
        // it really is not running, and leaves it alone if it is.
        ctx.log(`etcd node ${id}: ${String(error).split('\n')[0] ?? ''}; healing instead`);
        await ctl('heal');
      }
      await ctl('wait-healthy', '60');
      ctx.log(`etcd node ${id} restarted with its data`);
      return null;
    },
  };
  return {
    kind: 'etcd',
    async hold() {
      return healedTurn(scriptTurn(ctl, 900), () => ctl('wait-healthy', '60'), async () => {
        await ctl('heal');
        await ctl('wait-healthy', '60');
      });
    },
    async faults(servers) {
      return { kind: 'etcd', endpoints: servers.etcdCluster.map(hostPort), required: [killLeader], random: [killLeader], close: async () => undefined };
    },
  };
}

// --- Redis and Redlock ----------------------------------------------------------------

function redisControl(kind: 'redis' | 'redlock', ctl: ReturnType<typeof runner>): SourceControl {
  return {
    kind,
    async hold() {
      // One turn for the whole Redis set: the single node, the five, the pair.
      // heal: resumes, restarts, and re-creates the pair unless it is primary + replica in sync.
      return healedTurn(scriptTurn(ctl, 900), () => ctl('heal'));
    },
    async faults(servers, lockName) {
      return kind === 'redis' ? pairFaults(ctl, servers, lockName) : redlockFaults(ctl, servers);
    },
  };
}

function redlockFaults(ctl: ReturnType<typeof runner>, servers: TestServers): SourceFaults {
  const nodes = servers.redlock.map(hostPort);
  // redis.sh names the five nodes 1..5 in FK_REDLOCK's order; one at a time, so never a majority.
  // The node a fault takes, picked at random, and its process id before the fault.
  const pickNode = async (): Promise<{ n: number; pid: string }> => {
    const n = 1 + Math.floor(Math.random() * nodes.length);
    return { n, pid: await pidOf(n) };
  };
  const pidOf = async (n: number): Promise<string> => (await ctl('pid', String(n))).stdout;
  const target = (n: number): string => `redlock node ${n} (${nodes[n - 1] ?? '?'})`;
  const restart: ServerFault = {
    kind: 'node-restart',
    name: 'a restart of a Redlock node from its AOF',
    async inject(ctx) {
      const { n, pid: before } = await pickNode();
      await ctl('restart', String(n));
      const after = await pidOf(n);
      if (after === before) return `node ${n} kept pid ${before}: it was not restarted`;
      ctx.record({ kind: 'node-restart', target: target(n), at: Date.now(), detail: `SIGKILL of pid ${before}, started again from its AOF as pid ${after}` });
      return null;
    },
  };
  const pause: ServerFault = {
    kind: 'node-pause',
    name: 'a pause of a Redlock node',
    async inject(ctx) {
      const { n, pid } = await pickNode();
      const ms = Math.round(random(0.5, 2) * ctx.sessionMs);
      await ctl('pause', String(n)); // returns once the kernel shows it stopped
      try {
        ctx.record({ kind: 'node-pause', target: target(n), at: Date.now(), detail: `SIGSTOP of pid ${pid} (seen stopped) for ${ms} ms` });
        await ctx.wait(ms);
      } finally {
        await ctl('resume', String(n));
      }
      return null;
    },
  };
  return { kind: 'redlock', endpoints: nodes, required: [restart, pause], random: [restart, pause], close: async () => undefined };
}

type PairNode = 'primary' | 'replica';

async function pairFaults(ctl: ReturnType<typeof runner>, servers: TestServers, lockName: string): Promise<SourceFaults> {
  const [primaryUrl, replicaUrl] = servers.redisPair;
  const ports: Record<PairNode, number> = { primary: Number(new URL(primaryUrl).port), replica: Number(new URL(replicaUrl).port) };
  const counterKey = lockKeys(lockName)[1];
  // Which node serves now; the other follows it (after the turn's heal: primary).
  let master: PairNode = 'primary';
  const other = (n: PairNode): PairNode => (n === 'primary' ? 'replica' : 'primary');
  const floating = await FloatingAddress.start(`127.0.0.1:${ports[master]}`);
  // The standby replicates from the master through this proxy (a new one per pairing).
  let replication: TcpProxy | null = null;

  const info = async (n: PairNode): Promise<string> => String(await redisCommand(ports[n], 'INFO', 'replication'));
  const following = async (n: PairNode): Promise<boolean> => {
    const text = await info(n);
    return /^role:slave\r?$/m.test(text) && /^master_link_status:up\r?$/m.test(text) && replication !== null && text.includes(`master_port:${replication.port}\r`);
  };
  /** Make `standby` replicate from the other node through a fresh proxy, and wait until it is in sync. */
  const follow = async (standby: PairNode): Promise<void> => {
    await replication?.close();
    replication = await TcpProxy.start({ port: ports[other(standby)] });
    await redisCommand(ports[standby], 'REPLICAOF', '127.0.0.1', replication.port);
    if (!(await poll(() => following(standby), 30_000))) throw new Error(`the ${standby} did not sync with the ${other(standby)} through the replication proxy in 30 s`);
  };
  await follow('replica');
  const counter = async (n: PairNode): Promise<bigint> => {
    const value = await redisCommand(ports[n], 'GET', counterKey);
    return value === null ? 0n : BigInt(String(value));
  };

  const failover = (lagging: boolean): ServerFault => ({
    kind: 'failover',
    ...(lagging ? { variant: 'replica held back' } : {}),
    name: `a failover of the Redis primary to its replica ${lagging ? 'with replication held back while grants were made' : 'in sync'}`,
    async inject(ctx) {
      const from = master;
      const to = other(from);
      if (!(await following(to))) return `the ${to} does not follow the ${from} (its replication link is down)`;
      const link = replication as TcpProxy;
      let heldFor = '';
      if (lagging) {
        const t0 = performance.now();
        link.blackhole();
        const grants = ctx.grants();
        const end = performance.now() + 15_000;
        while (ctx.grants() - grants < 5 && performance.now() < end && !ctx.stopping()) await ctx.wait(20);
        const made = ctx.grants() - grants;
        if (made < 5) {
          link.resume();
          return `only ${made} grants while replication was held back for ${Math.round(performance.now() - t0)} ms`;
        }
        heldFor = `its replication held in a black hole for ${Math.round(performance.now() - t0)} ms while at least ${made} grants were made (dropped with the connection), `;
      }
      const before = await counter(from);
      await ctl('kill', from);
      link.cut(); // what it held back never reaches the replica
      // The promotion: REPLICAOF NO ONE (redis.sh promote does it for the node it calls the replica).
      if (to === 'replica') await ctl('promote');
      else {
        await redisCommand(ports[to], 'REPLICAOF', 'NO', 'ONE');
        if (!(await poll(async () => /^role:master\r?$/m.test(await info(to)), 5000))) throw new Error(`the ${to} is not a master after REPLICAOF NO ONE`);
      }
      floating.moveTo(`127.0.0.1:${ports[to]}`);
      master = to;
      const after = await counter(to);
      // The evidence of the lag: the promoted replica's counter is behind. A
      // failover whose replica had every INCR is the in-sync kind, whatever was tried.
      const lost = after < before;
      ctx.record({
        kind: 'failover',
        ...(lagging && lost ? { variant: 'replica held back' } : {}),
        target: `redis ${from} -> ${to}`,
        at: Date.now(),
        detail:
          `SIGKILL of the ${from} (token counter at least ${before}); the ${to}, ${heldFor}promoted with counter ${after}` +
          (lost ? `: the failover lost ${before - after} INCRs, the next grants repeat or go below tokens already handed out` : ''),
      });
      let why: string | null = null;
      if (lagging && !lost) why = `the promoted ${to} had every INCR (counter ${after}, at least ${before} on the ${from}): replication was not held back`;
      // The old primary comes back as the new one's replica: started from its
      // own AOF, then made to follow (the full sync drops what it had).
      await ctx.wait(random(300, 800));
      await ctl('restart', from);
      await follow(from);
      ctx.log(`redis ${from} restarted and following the ${to}`);
      return why;
    },
  });
  return {
    kind: 'redis',
    endpoints: [floating.address],
    required: [failover(false), failover(true)],
    random: [failover(false), failover(true)],
    close: async () => {
      await replication?.close();
      await floating.close();
    },
  };
}
