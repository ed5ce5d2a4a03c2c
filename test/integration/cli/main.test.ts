// The `fencekeeper` CLI as an operator runs it: the built bin in a real
// process, against the real ZooKeeper (and PostgreSQL for migrate).
import { readFileSync, readdirSync } from 'node:fs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSequencer, parseToken } from '../../../src/index.js';
import { ZooKeeperClient, lockStatus, zookeeperSourceId } from '../../../src/sources/zookeeper/index.js';
import { ExitCode } from '../../../src/cli/exit-codes.js';
import { testServers } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { assertBuilt, cli } from './helpers.js';
import { until } from '../../helpers/wait.js';

describe('fencekeeper CLI', () => {
  let zk: ZooKeeperClient;
  let connect: string;

  beforeAll(async () => {
    assertBuilt();
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
      const run = cli(['run', lock, '--zookeeper', `127.0.0.1:${proxy.port}`, '--session-timeout', '4000', '--', 'sh', '-c', script]);
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

  it('run and elect give the command its sequencer: the token bound to its lock and the ensemble', async () => {
    const name = uniqueLockName('cli-seq');
    const zk = await ZooKeeperClient.connect({ connectString: connect, sessionTimeoutMs: 4000 });
    try {
      const { id } = await zookeeperSourceId(zk);
      for (const [command, kind] of [['run', 'lock'], ['elect', 'election']] as const) {
        const result = await cli([command, name, '--zookeeper', connect, '--', 'sh', '-c', 'echo "$FENCING_TOKEN $FENCEKEEPER_SEQUENCER"']).done;
        expect(result.code).toBe(0);
        const [token, text] = result.stdout.trim().split(' ');
        expect(parseSequencer(text as string)).toEqual({ kind, name, source: { kind: 'zookeeper', id }, token: parseToken(token as string) });
      }
    } finally {
      await zk.close();
    }
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

  // Port 1 refuses connections: a ZooKeeper that is down.
  const DOWN = '127.0.0.1:1';

  it('a bad lock name exits 64 before connecting, with ZooKeeper up or down', async () => {
    const cases = [
      ['run', '/abs', '--', 'true'],
      ['run', 'a//b', '--', 'true'],
      ['run', 'a/../b', '--', 'true'],
      ['run', 'a/./b', '--', 'true'],
      ['run', 'jobs/', '--', 'true'],
      ['elect', '/leader', '--', 'true'],
      ['status', 'a//b'],
    ];
    for (const [command, name, ...rest] of cases) {
      for (const zookeeper of [connect, DOWN]) {
        const result = await cli([command as string, name as string, '--zookeeper', zookeeper, '--session-timeout', '1000', ...rest]).done;
        expect({ args: [command, name, zookeeper], code: result.code }).toEqual({ args: [command, name, zookeeper], code: 64 });
        expect(result.stderr).toContain(`bad ${command === 'elect' ? 'election' : 'lock'} name ${JSON.stringify(name)}`);
      }
    }
  });

  it('bad flag values and a malformed connect string exit 64 before connecting', async () => {
    const cases: [string[], string][] = [
      [['--grace', '-1'], '--grace'],
      [['--grace', '1.5'], '--grace'],
      [['--safety-margin', 'abc'], '--safety-margin'],
      [['--session-timeout', '0'], '--session-timeout'],
      [['--timeout', '-5'], '--timeout'],
    ];
    for (const [flags, named] of cases) {
      const result = await cli(['run', 'x', '--zookeeper', DOWN, ...flags, '--', 'true']).done;
      expect({ flags, code: result.code }).toEqual({ flags, code: 64 });
      expect(result.stderr).toContain(named);
    }
    const badConnect = await cli(['run', 'x', '--zookeeper', '[::1', '--', 'true']).done;
    expect(badConnect.code).toBe(64);
    expect(badConnect.stderr).toContain('--zookeeper');
  });

  it('a --safety-margin or --grace that does not fit the negotiated session exits 64 after connecting, and nothing runs', async () => {
    const lock = uniqueLockName('cli');
    const margin = await cli(['run', lock, '--zookeeper', connect, '--safety-margin', '999999', '--', 'sh', '-c', 'echo ran']).done;
    expect(margin.code).toBe(64);
    expect(margin.stderr).toContain('--safety-margin 999999');
    expect(margin.stdout).toBe('');
    // 10 s session: margin 2500 ms by default, so at most 1250 ms of grace.
    const grace = await cli(['run', lock, '--zookeeper', connect, '--session-timeout', '10000', '--grace', '5000', '--', 'sh', '-c', 'echo ran']).done;
    expect(grace.code).toBe(64);
    expect(grace.stderr).toContain('--grace 5000');
    expect(grace.stderr).toContain('1250 ms of 2500 ms');
    expect(grace.stdout).toBe('');
    expect(await lockStatus(zk, lock)).toEqual({ name: lock, holder: null, waiters: [] });
    // The bound needs the negotiated timeout: with ZooKeeper down it is never checked.
    const down = await cli(['run', lock, '--zookeeper', DOWN, '--session-timeout', '1000', '--safety-margin', '999999', '--', 'true']).done;
    expect(down.code).toBe(69);
  });

  it('documents every exit code in --help and in the CLI guide (docs/cli.md)', async () => {
    const help = (await cli(['run', '--help']).done).stdout;
    const demoHelp = (await cli(['demo', '--help']).done).stdout;
    const cliSection = readFileSync(new URL('../../../docs/cli.md', import.meta.url), 'utf8');
    for (const [name, code] of Object.entries(ExitCode)) {
      if (name === 'ok') continue;
      const shown = name === 'signalBase' ? '128 + n' : String(code);
      const inHelp = name === 'demoFailed' ? demoHelp.includes(`; ${code} a stale write`) : new RegExp(`^  ${shown.replace(/[+]/g, '\\+')}\\s`, 'm').test(help);
      expect({ name, inHelp }).toEqual({ name, inHelp: true });
      expect({ name, inReadme: cliSection.includes(`| ${shown} |`) }).toEqual({ name, inReadme: true });
    }
    // Every message stands on its own: no references to notes a user has never seen.
    for (const topic of ['', 'run', 'elect', 'status', 'migrate', 'demo']) {
      const text = (await cli(topic === '' ? ['--help'] : [topic, '--help']).done).stdout;
      expect({ topic, stray: text.match(/seed \d+|ARCHITECTURE|SERVICES\.md/g) }).toEqual({ topic, stray: null });
    }
  });

  it('exits 127 when the command cannot be started, and releases the lock', async () => {
    const lock = uniqueLockName('cli');
    const result = await cli(['run', lock, '--zookeeper', connect, '--', '/nonexistent/command']).done;
    expect(result.code).toBe(127);
    expect(result.stderr).toContain('cannot run /nonexistent/command');
    expect((await lockStatus(zk, lock)).holder).toBeNull();
  });

  it('migrate creates the fence table in a fresh schema, and a second run applies nothing', async () => {
    const admin = new pg.Pool({ connectionString: testServers().databaseUrl, max: 1 });
    const schema = uniqueId('fk_climig');
    const url = new URL(testServers().databaseUrl);
    // The tables land in the first schema of the connection's search_path.
    url.searchParams.set('options', `-c search_path=${schema}`);
    const inSchema = async (): Promise<{ tables: string[]; ledger: { name: string; applied_at: string }[] }> => {
      const tables = await admin.query<{ table_name: string }>(
        'select table_name from information_schema.tables where table_schema = $1 order by table_name',
        [schema],
      );
      const ledger = tables.rows.some((r) => r.table_name === 'fencekeeper_migrations')
        ? (await admin.query<{ name: string; applied_at: string }>(`select name, applied_at::text from ${schema}.fencekeeper_migrations order by name`)).rows
        : [];
      return { tables: tables.rows.map((r) => r.table_name), ledger };
    };
    try {
      await admin.query(`create schema ${schema}`);
      expect((await inSchema()).tables).toEqual([]);

      const first = await cli(['migrate'], { DATABASE_URL: url.href }).done;
      expect(first.stderr).toBe('');
      expect(first.code).toBe(0);
      // Every migration the package ships, in order.
      const shipped = readdirSync(new URL('../../../migrations/', import.meta.url)).filter((f) => /^\d+_.*\.sql$/.test(f)).sort();
      expect(shipped.slice(0, 2)).toEqual(['001_fences.sql', '002_tombstones.sql']);
      expect(first.stdout.trim().split('\n')).toEqual([...shipped.map((name) => `applied ${name}`), `up to date (${shipped.length} migrations, ${shipped.length} applied now)`]);
      const applied = await inSchema();
      expect(applied.tables).toEqual(['fencekeeper_effects', 'fencekeeper_fence_bindings', 'fencekeeper_fences', 'fencekeeper_idempotency_keys', 'fencekeeper_migrations', 'fencekeeper_table_bindings', 'fencekeeper_tombstones']);
      expect(applied.ledger.map((m) => m.name)).toEqual(shipped);

      const second = await cli(['migrate', '--database-url', url.href], { DATABASE_URL: '' }).done;
      expect(second.code).toBe(0);
      expect(second.stdout.trim()).toBe(`up to date (${shipped.length} migrations)`);
      expect(await inSchema()).toEqual(applied);
    } finally {
      await admin.query(`drop schema if exists ${schema} cascade`);
      await admin.end();
    }
  });

  it('--version and -V print the version of the package.json shipped beside the CLI', async () => {
    const { version } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };
    for (const flag of ['--version', '-V']) {
      const printed = await cli([flag]).done;
      expect(printed.code, flag).toBe(0);
      expect(printed.stderr).toBe('');
      expect(printed.stdout).toBe(`${version}\n`);
    }
    expect((await cli(['--help']).done).stdout).toContain('--version');
  });

  it('migrate without a database is a usage error; an unreachable one exits 69', async () => {
    const missing = await cli(['migrate'], { DATABASE_URL: '' }).done;
    expect(missing.code).toBe(64);
    expect(missing.stderr).toContain('DATABASE_URL');
    const down = await cli(['migrate', '--database-url', 'postgres://root@127.0.0.1:1/test']).done;
    expect(down.code).toBe(69);
    expect(down.stderr).toContain('migrate failed');
  });
});
