// What test/servers/redis.sh and etcd.sh promise, checked against the real
// servers: which instances answer where, with which persistence, and that each
// fault command does to the nodes what its name says (a SIGKILLed node is
// gone, a restart keeps the acknowledged writes, a restart without data loses
// them, a paused node answers nothing until resumed, a killed etcd leader is
// replaced and rejoins as a follower).
//
// The file takes the servers itself (`acquire`, then the fault turn), so it
// runs whether or not the global setup started them; afterwards `heal` puts
// every node back before the turn and the servers are given back.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { uniqueId } from '../../helpers/unique.js';

const SERVERS_DIR = fileURLToPath(new URL('../../servers/', import.meta.url));

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * This file kills, wipes and pauses nodes: it does so on a server set of its
 * own (its own state directory and ports), never on the set the rest of the
 * suite is using at the same time. Two runs of this file (two checkouts)
 * share this private set and take turns through its fault turn.
 */
const PRIVATE_SET: Readonly<Record<string, string>> = {
  FK_STATE_DIR: '/tmp/fencekeeper-test-server-scripts',
  FK_REDIS_BASE: '6490',
  FK_ETCD_PORT: '2589',
  FK_ETCD_PEER_PORT: '2689',
  FK_ETCD_CLUSTER_BASE: '2590',
  FK_ETCD_CLUSTER_PEER_BASE: '2690',
};

function run(file: string, args: readonly string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { env: { ...process.env, ...PRIVATE_SET, FK_USER_PID: String(process.pid), ...env }, timeout: timeoutMs }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : 1;
      resolve({ code, stdout: stdout.trim(), stderr: stderr.trim() });
    });
  });
}

/** Run a server script command that must succeed; its stdout. */
async function script(path: string, ...args: string[]): Promise<string> {
  const r = await run('bash', [path, ...args]);
  if (r.code !== 0) throw new Error(`${path} ${args.join(' ')} failed (${r.code}):\n${r.stderr}`);
  return r.stdout;
}

function parseEnv(stdout: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const m = /^([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
    if (m?.[1] !== undefined && m[2] !== undefined) vars[m[1]] = m[2];
  }
  return vars;
}

function portOf(url: string): number {
  return Number(new URL(url).port);
}

/** One redis-cli command; its reply as redis-cli prints it (nil = ''). */
async function redis(port: number, ...args: string[]): Promise<string> {
  const r = await run('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args], {}, 5000);
  if (r.code !== 0) throw new Error(`redis-cli -p ${port} ${args.join(' ')}: ${r.stderr || `exit ${r.code}`}`);
  return r.stdout;
}

/** INFO section as a map of field -> value. */
async function redisInfo(port: number, section: string): Promise<Map<string, string>> {
  const fields = new Map<string, string>();
  for (const line of (await redis(port, 'info', section)).split(/\r?\n/)) {
    const at = line.indexOf(':');
    if (at > 0) fields.set(line.slice(0, at), line.slice(at + 1));
  }
  return fields;
}

/** Does anything accept a TCP connection on 127.0.0.1:port? */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });
}

/**
 * The one-letter state of /proc/PID/stat (R, S, T, ...), or undefined when
 * the process is gone. A zombie is gone too: the servers are re-parented to
 * PID 1, which may reap them late.
 */
async function procState(pid: number): Promise<string | undefined> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => undefined);
  const state = stat === undefined ? undefined : /\) (\S)/.exec(stat)?.[1];
  return state === 'Z' || state === 'X' ? undefined : state;
}

/** Poll `probe` every 50 ms until it returns a value other than undefined, or throw after ms. */
async function waitFor<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Take a server set for this file, with its fault turn; give both back afterwards. */
function useServers(name: string, vars: Record<string, string>): void {
  const path = SERVERS_DIR + name;
  let acquired = false;
  let held = false;
  beforeAll(async () => {
    Object.assign(vars, parseEnv(await script(path, 'acquire')));
    acquired = true;
    await script(path, 'hold-faults', '600');
    held = true;
  }, 11 * 60_000);
  afterAll(async () => {
    try {
      if (held) await script(path, 'heal');
    } finally {
      if (held) await script(path, 'release-faults');
      if (acquired) await script(path, 'release');
    }
  }, 120_000);
}

describe('redis.sh', () => {
  const env: Record<string, string> = {};
  useServers('redis.sh', env);
  const ctl = (...args: string[]): Promise<string> => script(env.FK_REDIS_CTL ?? '', ...args);
  const single = (): number => portOf(env.FK_REDIS ?? '');
  const redlock = (): number[] => (env.FK_REDLOCK ?? '').split(',').map(portOf);
  const pair = (): [number, number] => {
    const [primary, replica] = (env.FK_REDIS_PAIR ?? '').split(',').map(portOf);
    return [primary ?? 0, replica ?? 0];
  };
  const all = (): number[] => [single(), ...redlock(), ...pair()];
  /** Redlock node `n` (1..5): its port, a key written there with `value` and acknowledged, and the node's pid before the fault. */
  const written = async (n: number, prefix: string, value: string): Promise<{ port: number; key: string; pid: number }> => {
    const port = redlock()[n - 1] ?? 0;
    const key = uniqueId(prefix);
    expect(await redis(port, 'set', key, value)).toBe('OK');
    return { port, key, pid: Number(await ctl('pid', String(n))) };
  };

  it('prints one single instance, five Redlock nodes and a pair, on distinct ports that are not 6379', () => {
    expect(env.FK_REDIS).toMatch(/^redis:\/\/127\.0\.0\.1:\d+$/);
    expect(redlock()).toHaveLength(5);
    expect(env.FK_REDIS_PAIR?.split(',')).toHaveLength(2);
    expect(new Set(all()).size).toBe(8);
    expect(all()).not.toContain(6379);
    expect(env.FK_REDIS_CTL).toBe(SERVERS_DIR + 'redis.sh');
  });

  it('every instance answers PING, is its own server and runs AOF fsync always without eviction', async () => {
    const runIds = new Set<string>();
    for (const port of all()) {
      expect(await redis(port, 'ping'), `port ${port}`).toBe('PONG');
      expect(await redis(port, 'config', 'get', 'appendonly'), `port ${port}`).toBe('appendonly\nyes');
      expect(await redis(port, 'config', 'get', 'appendfsync'), `port ${port}`).toBe('appendfsync\nalways');
      expect(await redis(port, 'config', 'get', 'maxmemory-policy'), `port ${port}`).toBe('maxmemory-policy\nnoeviction');
      expect(await redis(port, 'config', 'get', 'save'), `port ${port}`).toBe('save');
      runIds.add((await redisInfo(port, 'server')).get('run_id') ?? '');
    }
    expect(runIds.size).toBe(8);
  });

  it('the Redlock nodes share nothing: a key set on one is on no other', async () => {
    const key = uniqueId('independent');
    const [first, ...rest] = redlock();
    expect(await redis(first ?? 0, 'set', key, 'one')).toBe('OK');
    for (const port of rest) expect(await redis(port, 'exists', key), `port ${port}`).toBe('0');
    await redis(first ?? 0, 'del', key);
  });

  it('the single instance takes DEBUG commands from 127.0.0.1', async () => {
    expect(await redis(single(), 'debug', 'sleep', '0')).toBe('OK');
  });

  it('the replica replicates the primary and refuses writes', async () => {
    const [primary, replica] = pair();
    const info = await redisInfo(replica, 'replication');
    expect(info.get('role')).toBe('slave');
    expect(info.get('master_port')).toBe(String(primary));
    expect(info.get('master_link_status')).toBe('up');
    const key = uniqueId('replicated');
    expect(await redis(primary, 'set', key, 'v1')).toBe('OK');
    expect(await waitFor('the write reaches the replica', 10_000, async () => ((await redis(replica, 'get', key)) === 'v1' ? true : undefined))).toBe(true);
    expect(await redis(replica, 'set', key, 'v2')).toMatch(/^READONLY/);
  });

  it('kill N ends the process, restart N brings back a write acknowledged before the kill', async () => {
    const { port, key, pid } = await written(3, 'durable', 'kept');
    await ctl('kill', '3');
    expect(await procState(pid)).toBeUndefined();
    expect(await accepts(port)).toBe(false);
    await ctl('restart', String(port)); // by port this time
    const restarted = Number(await ctl('pid', '3'));
    expect(restarted).not.toBe(pid);
    expect(await redis(port, 'get', key)).toBe('kept');
  });

  it('kill N ends a paused node at once (SIGKILL, which a stopped process cannot wait out)', async () => {
    const pid = Number(await ctl('pid', '1'));
    await ctl('pause', '1');
    expect(await procState(pid)).toBe('T');
    // a SIGTERM would leave it stopped: kill would wait 10 s for it to go, then fail
    await ctl('kill', '1');
    expect(await procState(pid)).toBeUndefined();
    await ctl('restart', '1');
    expect(await redis(redlock()[0] ?? 0, 'ping')).toBe('PONG');
  });

  it('restart N on a running node is a crash and a restart from its AOF', async () => {
    const { port, key, pid } = await written(2, 'crash', 'kept');
    await ctl('restart', '2');
    expect(await procState(pid)).toBeUndefined();
    expect(await redis(port, 'get', key)).toBe('kept');
  });

  it('restart-empty N comes back without the data it had acknowledged', async () => {
    const { port, key, pid } = await written(4, 'lost', 'gone');
    expect(await redis(port, 'get', key)).toBe('gone');
    await ctl('restart-empty', '4');
    expect(await procState(pid)).toBeUndefined();
    expect(await redis(port, 'ping')).toBe('PONG');
    expect(await redis(port, 'exists', key)).toBe('0');
    expect(await redis(port, 'config', 'get', 'appendfsync')).toBe('appendfsync\nalways');
  });

  it('pause N stops the process: a command waits unanswered until resume N', async () => {
    const port = redlock()[4] ?? 0;
    const pid = Number(await ctl('pid', '5'));
    const socket = net.connect(port, '127.0.0.1');
    socket.setEncoding('utf8');
    let reply = '';
    socket.on('data', (chunk: string) => { reply += chunk; });
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    try {
      await ctl('pause', '5');
      expect(await procState(pid)).toBe('T');
      socket.write('PING\r\n');
      await new Promise((r) => setTimeout(r, 500));
      expect(reply).toBe('');
      await ctl('resume', '5');
      await waitFor('the PONG after resume', 5000, async () => (reply === '+PONG\r\n' ? true : undefined));
      expect(await procState(pid)).not.toBe('T');
    } finally {
      socket.destroy();
      await ctl('resume', '5').catch(() => undefined);
    }
  });

  it('promote makes the replica a writable master after the primary died; pair-reset re-creates the pair', async () => {
    const [primary, replica] = pair();
    const old = uniqueId('before-reset');
    expect(await redis(primary, 'set', old, 'v')).toBe('OK');
    await ctl('kill', 'primary');
    expect(await accepts(primary)).toBe(false);
    await ctl('promote');
    expect((await redisInfo(replica, 'replication')).get('role')).toBe('master');
    const key = uniqueId('promoted');
    expect(await redis(replica, 'set', key, 'v')).toBe('OK');

    await ctl('pair-reset');
    expect((await redisInfo(primary, 'replication')).get('role')).toBe('master');
    const info = await redisInfo(replica, 'replication');
    expect(info.get('role')).toBe('slave');
    expect(info.get('master_link_status')).toBe('up');
    // re-created empty: what the old primary and the promoted replica held is gone
    expect(await redis(primary, 'exists', old)).toBe('0');
    expect(await redis(replica, 'exists', key)).toBe('0');
    const again = uniqueId('replicated');
    expect(await redis(primary, 'set', again, 'v')).toBe('OK');
    expect(await waitFor('the write reaches the new replica', 10_000, async () => ((await redis(replica, 'get', again)) === 'v' ? true : undefined))).toBe(true);
  });
});

/** `etcdctl endpoint status` of one endpoint: member id, is leader, raft term. */
async function etcdStatus(endpoint: string): Promise<{ id: string; leader: boolean; term: number }> {
  const r = await run('etcdctl', ['--endpoints', endpoint, '--dial-timeout=1s', '--command-timeout=3s', 'endpoint', 'status'], { ETCDCTL_API: '3' }, 10_000);
  if (r.code !== 0) throw new Error(`etcdctl endpoint status ${endpoint}: ${r.stderr}`);
  // endpoint, ID, version, db size, is leader, is learner, raft term, raft index, ...
  const fields = r.stdout.split(', ');
  return { id: fields[1] ?? '', leader: fields[4] === 'true', term: Number(fields[6]) };
}

async function etcdctl(endpoints: string, ...args: string[]): Promise<string> {
  const r = await run('etcdctl', ['--endpoints', endpoints, '--dial-timeout=1s', '--command-timeout=5s', ...args], { ETCDCTL_API: '3' }, 15_000);
  if (r.code !== 0) throw new Error(`etcdctl ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

describe('etcd.sh', () => {
  const env: Record<string, string> = {};
  useServers('etcd.sh', env);
  const ctl = (...args: string[]): Promise<string> => script(env.FK_ETCD_CTL ?? '', ...args);
  const members = (): string[] => (env.FK_ETCD_CLUSTER ?? '').split(',');

  it('prints a single node and a 3-node cluster on 127.0.0.1', () => {
    expect(env.FK_ETCD).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(members()).toHaveLength(3);
    for (const url of members()) expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    expect(new Set([env.FK_ETCD, ...members()]).size).toBe(4);
    expect(env.FK_ETCD_CTL).toBe(SERVERS_DIR + 'etcd.sh');
  });

  it('the single node is a cluster of one that leads and stores', async () => {
    const single = env.FK_ETCD ?? '';
    expect((await etcdStatus(single)).leader).toBe(true);
    expect((await etcdctl(single, 'member', 'list')).split('\n')).toHaveLength(1);
    const key = uniqueId('single');
    await etcdctl(single, 'put', key, 'v');
    expect(await etcdctl(single, 'get', key, '--print-value-only')).toBe('v');
    await etcdctl(single, 'del', key);
  });

  it('every node fsyncs: none runs with --unsafe-no-fsync', async () => {
    for (const n of ['1', '2', '3']) {
      const cmdline = (await readFile(`/proc/${await ctl('pid', n)}/cmdline`, 'utf8')).split('\0');
      expect(cmdline).toContain('--data-dir');
      expect(cmdline).not.toContain('--unsafe-no-fsync');
    }
  });

  it('the cluster has 3 started members and one leader, the one `leader` names', async () => {
    const list = (await etcdctl(members().join(','), 'member', 'list')).split('\n');
    expect(list).toHaveLength(3);
    for (const line of list) expect(line).toMatch(/, started, /);
    const statuses = await Promise.all(members().map(etcdStatus));
    expect(statuses.filter((s) => s.leader)).toHaveLength(1);
    const index = Number(await ctl('leader'));
    expect(statuses[index - 1]?.leader).toBe(true);
  });

  it('kill-leader: another member leads within a bounded wait, and restart rejoins the killed one', async () => {
    const before = await Promise.all(members().map(etcdStatus));
    const oldIndex = Number(await ctl('leader'));
    const oldPid = Number(await ctl('pid', String(oldIndex)));
    const killed = Number(await ctl('kill-leader'));
    expect(killed).toBe(oldIndex);
    expect(await procState(oldPid)).toBeUndefined();
    const oldUrl = members()[killed - 1] ?? '';
    expect(await accepts(portOf(oldUrl))).toBe(false);

    const survivors = members().filter((_, i) => i !== killed - 1);
    // a generous bound for a loaded 2-core machine; elections take ~1 s here
    const newLeader = await waitFor('a new leader', 30_000, async () => {
      const statuses = await Promise.all(survivors.map(etcdStatus));
      const leader = statuses.find((s) => s.leader);
      return leader !== undefined && leader.term > Math.max(...before.map((s) => s.term)) ? leader : undefined;
    });
    expect(newLeader.id).not.toBe(before[killed - 1]?.id);
    expect(Number(await ctl('leader'))).not.toBe(killed);
    const key = uniqueId('failover');
    await etcdctl(survivors.join(','), 'put', key, 'written-while-down');

    await ctl('restart', String(killed));
    expect(Number(await ctl('pid', String(killed)))).not.toBe(oldPid);
    const rejoined = await etcdStatus(oldUrl);
    expect(rejoined.id).toBe(before[killed - 1]?.id);
    expect(rejoined.leader).toBe(false);
    // a serializable read is answered from the node's own store: it has caught up
    expect(await waitFor('the restarted node has the write', 10_000, async () => {
      const value = await etcdctl(oldUrl, 'get', key, '--consistency=s', '--print-value-only');
      return value === 'written-while-down' ? true : undefined;
    })).toBe(true);
    expect((await etcdctl(members().join(','), 'member', 'list')).split('\n')).toHaveLength(3);
    await etcdctl(members().join(','), 'del', key);
  });

  it('kill N of a follower keeps the cluster serving; restart N brings it back', async () => {
    const leader = Number(await ctl('leader'));
    const follower = leader === 1 ? 2 : 1;
    await ctl('kill', String(follower));
    expect(await accepts(portOf(members()[follower - 1] ?? ''))).toBe(false);
    // Serving, not "the same leader": on a loaded 2-core machine a 500 ms
    // election timeout can move leadership between the two survivors.
    const survivors = members().filter((_, i) => i !== follower - 1);
    expect(await ctl('leader')).toMatch(/^[123]$/);
    const key = uniqueId('follower');
    await etcdctl(survivors.join(','), 'put', key, 'v');
    await ctl('restart', String(follower));
    expect(await waitFor('the follower has the write', 10_000, async () => {
      const value = await etcdctl(members()[follower - 1] ?? '', 'get', key, '--consistency=s', '--print-value-only');
      return value === 'v' ? true : undefined;
    })).toBe(true);
    await ctl('wait-healthy', '30');
    await etcdctl(members().join(','), 'del', key);
  });
});
