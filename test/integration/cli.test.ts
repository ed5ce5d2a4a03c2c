// The `fencekeeper` CLI as an operator runs it: the built bin in a real
// process, against the real ZooKeeper (and PostgreSQL for migrate).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient, lockStatus, parseToken } from '../../src/index.js';
import { testServers } from '../helpers/servers.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { uniqueLockName } from '../helpers/unique.js';

const BIN = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function cli(args: string[], env: NodeJS.ProcessEnv = {}): { done: Promise<Run>; stdout: () => string } {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const done = new Promise<Run>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
  return { done, stdout: () => stdout };
}

async function until(check: () => boolean | Promise<boolean>, what: string, limitMs = 20_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('fencekeeper CLI', () => {
  let zk: ZooKeeperClient;
  let connect: string;

  beforeAll(async () => {
    if (!existsSync(BIN)) throw new Error(`${BIN} is missing: run 'npm run build' first (npm test does)`);
    connect = testServers().zkStandalone;
    zk = await ZooKeeperClient.connect({ connectString: connect, sessionTimeoutMs: 4000 });
  });
  afterAll(async () => {
    await zk?.close();
  });

  it('run passes the token and lock name to the command and exits with its code', async () => {
    const lock = uniqueLockName('cli');
    const run = cli(['run', lock, '--zookeeper', connect, '--', 'sh', '-c', 'echo "$FENCING_TOKEN $FENCEKEEPER_LOCK"; exit 3']);
    const result = await run.done;
    expect(result.code).toBe(3);
    const [token, name] = result.stdout.trim().split(' ');
    expect(parseToken(token as string)).toBeGreaterThan(0n);
    expect(name).toBe(lock);
    // Released on exit: the queue is empty.
    expect((await lockStatus(zk, lock)).holder).toBeNull();
  });

  it("the token is the czxid of the holder's queue node, and status shows holder and waiters", async () => {
    const lock = uniqueLockName('cli');
    const holder = cli(['run', lock, '--zookeeper', connect, '--', 'sh', '-c', 'echo "$FENCING_TOKEN"; exec sleep 30']);
    await until(() => holder.stdout().includes('\n'), 'the holder to start');
    const waiter = cli(['run', lock, '--zookeeper', connect, '--', 'true']);
    await until(async () => (await lockStatus(zk, lock)).waiters.length === 1, 'the waiter to queue');

    const status = await lockStatus(zk, lock);
    expect(status.holder?.token).toBe(parseToken(holder.stdout().trim()));

    const shown = await cli(['status', lock, '--zookeeper', connect, '--json']).done;
    expect(shown.code).toBe(0);
    const parsed = JSON.parse(shown.stdout) as { queue: { role: string; token: string }[] };
    expect(parsed.queue.map((e) => e.role)).toEqual(['holder', 'waiter']);
    expect(parsed.queue[0]?.token).toBe(holder.stdout().trim());
    expect(BigInt(parsed.queue[1]?.token as string)).toBeGreaterThan(BigInt(parsed.queue[0]?.token as string));

    const table = await cli(['status', lock, '--zookeeper', connect]).done;
    expect(table.stdout).toContain('held, 1 waiting');
    expect(table.stdout).toContain(holder.stdout().trim());

    // Deleting the holder's node (an operator taking the lock away) stops its command.
    await zk.delete(status.holder?.path as string);
    const held = await holder.done;
    expect(held.code).toBe(143); // sh killed by SIGTERM: 128 + 15
    expect(held.stderr).toMatch(/lock .* lost .*node was deleted/);
    expect((await waiter.done).code).toBe(0);
  });

  it('exits 75 with a clear message when the lock is not free within --timeout, leaving no node', async () => {
    const lock = uniqueLockName('cli');
    const holder = cli(['run', lock, '--zookeeper', connect, '--', 'sh', '-c', 'echo up; exec sleep 30']);
    await until(() => holder.stdout().includes('up'), 'the holder to start');
    const late = await cli(['run', lock, '--zookeeper', connect, '--timeout', '300', '--', 'true']).done;
    expect(late.code).toBe(75);
    expect(late.stderr).toContain('not acquired within 300 ms');
    const status = await lockStatus(zk, lock);
    expect(status.waiters).toEqual([]);
    await zk.delete(status.holder?.path as string);
    await holder.done;
  });

  it('stops the command when the session is lost (connection black-holed past the step-down deadline)', async () => {
    const proxy = await TcpProxy.to(connect);
    try {
      const lock = uniqueLockName('cli');
      const script = 'trap "echo got-term; exit 0" TERM; echo started; while :; do sleep 0.05; done';
      const run = cli(['run', lock, '--zookeeper', `127.0.0.1:${proxy.port}`, '--session-timeout', '4000', '--grace', '2000', '--', 'sh', '-c', script]);
      await until(() => run.stdout().includes('started'), 'the command to start');
      proxy.blackhole();
      const result = await run.done;
      expect(result.stdout).toContain('got-term');
      expect(result.stderr).toMatch(/lock .* lost/);
      // The command exited 0 after being stopped: the CLI says the lock was lost.
      expect(result.code).toBe(76);
    } finally {
      await proxy.close();
    }
  });

  it('elect runs the command with the epoch as its token', async () => {
    const name = uniqueLockName('cli-elect');
    const result = await cli(['elect', name, '--zookeeper', connect, '--id', 'node-a', '--', 'sh', '-c', 'echo "$FENCING_TOKEN $FENCEKEEPER_EPOCH $FENCEKEEPER_ELECTION"']).done;
    expect(result.code).toBe(0);
    const [token, epoch, election] = result.stdout.trim().split(' ');
    expect(token).toBe(epoch);
    expect(parseToken(token as string)).toBeGreaterThan(0n);
    expect(election).toBe(name);
  });

  it('answers usage errors with 64 and an unreachable ZooKeeper with 69', async () => {
    const noName = await cli(['run', '--zookeeper', connect, '--', 'true']).done;
    expect(noName.code).toBe(64);
    expect(noName.stderr).toContain('exactly one lock name');
    const noCommand = await cli(['run', 'x', '--zookeeper', connect]).done;
    expect(noCommand.code).toBe(64);
    const badTimeout = await cli(['run', 'x', '--timeout', '-5', '--zookeeper', connect, '--', 'true']).done;
    expect(badTimeout.code).toBe(64);
    const unknown = await cli(['frobnicate']).done;
    expect(unknown.code).toBe(64);
    const noZk = await cli(['status', 'x'], { ZOOKEEPER: '' }).done;
    expect(noZk.code).toBe(64);
    expect(noZk.stderr).toContain('ZOOKEEPER');
    const help = await cli(['run', '--help']).done;
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('FENCING_TOKEN');
    // Port 1 refuses at once; the client keeps trying until its connect timeout (the session timeout).
    const down = await cli(['run', 'x', '--zookeeper', '127.0.0.1:1', '--session-timeout', '1000', '--', 'true']).done;
    expect(down.code).toBe(69);
    expect(down.stderr).toContain('cannot reach ZooKeeper');
  });

  it('exits 127 when the command cannot be started, and releases the lock', async () => {
    const lock = uniqueLockName('cli');
    const result = await cli(['run', lock, '--zookeeper', connect, '--', '/nonexistent/command']).done;
    expect(result.code).toBe(127);
    expect(result.stderr).toContain('cannot run /nonexistent/command');
    expect((await lockStatus(zk, lock)).holder).toBeNull();
  });

  it('migrate creates the fence table in DATABASE_URL, idempotently', async () => {
    const url = testServers().databaseUrl;
    const first = await cli(['migrate'], { DATABASE_URL: url }).done;
    expect(first.code).toBe(0);
    const second = await cli(['migrate', '--database-url', url]).done;
    expect(second.code).toBe(0);
    expect(second.stdout).toContain('up to date');
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    try {
      const { rows } = await pool.query<{ n: string }>("select count(*) as n from information_schema.tables where table_name = 'fencekeeper_fences'");
      expect(Number(rows[0]?.n)).toBeGreaterThan(0);
    } finally {
      await pool.end();
    }
    const missing = await cli(['migrate'], { DATABASE_URL: '' }).done;
    expect(missing.code).toBe(64);
  });
});
