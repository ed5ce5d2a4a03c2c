// The CLI over PostgreSQL: `--lock-service postgres://…` (or postgresql://,
// or FENCEKEEPER_LOCK_SERVICE) for run, elect and status, as an operator
// runs the built bin, against the suite's real PostgreSQL. Each file gets a
// schema of its own (the URL's `options=-c search_path=…`), migrated by
// `fencekeeper migrate`; a second schema is left without the migration.
import pg from 'pg';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DATABASE_URL, createSchema, dropSchema, uniqueName } from '../postgres/helpers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { assertBuilt, cli, finishedWithin } from './helpers.js';

const schema = uniqueName('cli_pg');
const bare = uniqueName('cli_pg_bare');
const root = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });

/** DATABASE_URL on `search`, in `scheme`. */
function urlOn(search: string, scheme = 'postgres'): string {
  const url = new URL(DATABASE_URL);
  url.searchParams.set('options', `-c search_path=${search}`);
  return url.href.replace(/^postgres(?:ql)?:/, `${scheme}:`);
}
const url = (): string => urlOn(schema);

interface Status {
  readonly lock: string;
  readonly queue: { role: string; token: string; owner: string; session: string; node: string }[];
  readonly durability?: Record<string, string>;
}

async function status(name: string): Promise<Status> {
  const r = await within(cli(['status', name, '--json', '--lock-service', url()]).done, 30_000, 'status');
  expect(r.code, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Status;
}

beforeAll(async () => {
  assertBuilt();
  await createSchema(root, schema);
  await createSchema(root, bare);
  const migrated = await within(cli(['migrate', '--database-url', url()]).done, 60_000, 'fencekeeper migrate');
  expect(migrated.code, migrated.stderr).toBe(0);
}, 90_000);

afterAll(async () => {
  await dropSchema(root, schema);
  await dropSchema(root, bare);
  await root.end();
});

describe('fencekeeper over PostgreSQL', () => {
  it('run holds the lock while the command runs, with its token; status shows it and the durability settings; a second run waits, then gets a larger token', async () => {
    const name = uniqueLockName('pg_cli_run');
    const holder = cli(['run', name, '--lock-service', url(), '--', 'sh', '-c', 'echo "token=$FENCING_TOKEN seq=$FENCEKEEPER_SEQUENCER"; exec sleep 30']);
    await until(() => holder.stdout().includes('token='), () => `the command to start: ${holder.stderr()}`);
    const token = /token=(\d+)/.exec(holder.stdout())![1]!;
    expect(holder.stdout()).toMatch(/seq=fk1:lock:postgres:\d+-\d+:\d+:/);

    const shown = await status(name);
    expect(shown.queue).toHaveLength(1);
    expect(shown.queue[0]).toMatchObject({ role: 'holder', token });
    expect(shown.queue[0]!.owner).not.toBe('');
    expect(shown.queue[0]!.session).toMatch(/^session \d+$/);
    // What the database says, as lockStatus reads it.
    const settings = (await root.query<{ c: string; s: string }>("SELECT current_setting('synchronous_commit') AS c, current_setting('synchronous_standby_names') AS s")).rows[0]!;
    expect(shown.durability).toEqual({ synchronous_commit: settings.c, synchronous_standby_names: settings.s });
    const table = await cli(['status', name, '--lock-service', url()]).done;
    expect(table.stdout).toContain(`${name}: held, 0 waiting`);
    expect(table.stdout).toMatch(/^durability: synchronous_commit=\w+, synchronous_standby_names=/m);

    const next = cli(['run', name, '--lock-service', urlOn(schema, 'postgresql'), '--', 'sh', '-c', 'echo "token=$FENCING_TOKEN"']);
    await until(async () => (await status(name)).queue.length === 2, 'the second run to queue');
    const queued = await status(name);
    expect(queued.queue.map((e) => e.role)).toEqual(['holder', 'waiter']);
    // SIGTERM to the holder: its command ends, the lock passes to the waiter.
    holder.child.kill('SIGTERM');
    const second = await within(next.done, 30_000, 'the second run');
    expect(second.code, second.stderr).toBe(0);
    expect(BigInt(/token=(\d+)/.exec(second.stdout)![1]!)).toBeGreaterThan(BigInt(token));
    await holder.done;
    expect((await status(name)).queue).toEqual([]);
  });

  it('elect runs the command as leader with its epoch (FENCEKEEPER_LOCK_SERVICE)', async () => {
    const name = uniqueLockName('pg_cli_elect');
    const r = await within(cli(['elect', name, '--id', 'node-a', '--', 'sh', '-c', 'echo "epoch=$FENCEKEEPER_EPOCH token=$FENCING_TOKEN"'], { FENCEKEEPER_LOCK_SERVICE: url() }).done, 30_000, 'elect');
    expect(r.code, r.stderr).toBe(0);
    const [, epoch, token] = /epoch=(\d+) token=(\d+)/.exec(r.stdout)!;
    expect(epoch).toBe(token);
    expect(BigInt(epoch!)).toBeGreaterThan(0n);
  });

  it('status --watch prints the queue again when a holder comes and goes', async () => {
    const name = uniqueLockName('pg_cli_watch');
    const watcher = cli(['status', name, '--watch', '--json', '--lock-service', url()]);
    await until(() => watcher.stdout().includes('"event":"queue"'), () => `the first listing: ${watcher.stderr()}`);
    // The command holds the lock until the watcher has shown it held.
    const go = join(mkdtempSync(join(tmpdir(), 'fk-pg-cli-')), 'go');
    const running = cli(['run', name, '--lock-service', url(), '--', 'sh', '-c', `while [ ! -e ${go} ]; do sleep 0.05; done`]);
    await until(() => watcher.stdout().trim().split('\n').length >= 2, () => `the held listing: ${watcher.stdout()} ${watcher.stderr()}`);
    writeFileSync(go, '');
    const run = await within(running.done, 30_000, 'the run');
    expect(run.code, run.stderr).toBe(0);
    await until(() => watcher.stdout().trim().split('\n').length >= 3, () => `three listings: ${watcher.stdout()}`);
    const listings = watcher.stdout().trim().split('\n').map((l) => JSON.parse(l) as { event: string; queue: { role: string }[] });
    expect(listings.slice(0, 3).map((l) => l.queue.map((e) => e.role))).toEqual([[], ['holder'], []]);
    watcher.child.kill('SIGINT');
    expect((await within(watcher.done, 15_000, 'the watcher to end')).code).toBe(0);
  });

  it('SIGTERM ends a run that holds the lock promptly (143), and nothing is left held', async () => {
    const name = uniqueLockName('pg_cli_term');
    const holder = cli(['run', name, '--lock-service', url(), '--', 'sh', '-c', 'echo up; exec sleep 60']);
    await until(() => holder.stdout().includes('up'), () => `the command to start: ${holder.stderr()}`);
    const sent = performance.now();
    holder.child.kill('SIGTERM');
    // Liveness bound, generous for a loaded machine: far below the 60 s the command would run.
    const ended = await finishedWithin(holder, 15_000);
    expect(ended.code, ended.stderr).toBe(143);
    expect(performance.now() - sent).toBeLessThan(15_000);
    expect((await status(name)).queue).toEqual([]);
  });

  it('a bad URL or name is a usage error (64) before any connection; a database without the migration, or none at all, exits 69 saying what to do', async () => {
    for (const bad of ['postgres://', 'postgres://user:pw@127.0.0.1:5432/db', 'postgres://127.0.0.1:5432/a/b', 'postgres://127.0.0.1:5432/db#x', 'postgres://h1,h2/db', 'postgres://127.0.0.1:99999/db']) {
      const r = await cli(['status', 'jobs/a', '--lock-service', bad]).done;
      expect(r.code, `${bad}: ${r.stderr}`).toBe(64);
      expect(r.stderr).toMatch(/^fencekeeper: --lock-service: /);
    }
    const lease = await cli(['status', 'jobs/a', '--lock-service', url(), '--session-timeout', '100']).done;
    expect(lease.code).toBe(64);
    expect(lease.stderr).toContain('500..86400000');
    const badName = await cli(['status', `jobs/${'a'.repeat(1100)}`, '--lock-service', url()]).done;
    expect(badName.code).toBe(64);

    const missing = await within(cli(['run', 'jobs/a', '--lock-service', urlOn(bare), '--', 'true']).done, 30_000, 'run on the bare schema');
    expect(missing.code).toBe(69);
    expect(missing.stderr).toMatch(/has no fencekeeper tables \(SCHEMA_MISSING: fencekeeper_\w+ is missing\): run `fencekeeper migrate/);
    // Nothing was made in the bare schema.
    const made = await root.query('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [bare]);
    expect(made.rows).toEqual([]);

    const unreachable = await within(cli(['status', 'jobs/a', '--lock-service', 'postgres://127.0.0.1:1/db']).done, 30_000, 'status on a closed port');
    expect(unreachable.code, unreachable.stderr).toBe(69);
    expect(unreachable.stderr).toContain('cannot use PostgreSQL at 127.0.0.1:1/db');
  });
});
