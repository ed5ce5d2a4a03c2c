// The CLI against ZooKeeper's secure client port, and with digest
// credentials: TLS by flag or environment, credentials from ZOOKEEPER_AUTH or
// a file, never from the command line, and never visible in the arguments of
// any process of a run (what `ps` shows every user of the machine).
import { readFileSync, readdirSync } from 'node:fs';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ZooKeeperClient, digestAclId } from '../../../src/sources/zookeeper/client.js';
import { Perms } from '../../../src/sources/zookeeper/protocol.js';
import { LOCKS_ROOT } from '../../../src/sources/zookeeper/recipes/lock.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { within } from '../../helpers/wait.js';
import { assertBuilt, cli, type Run } from './helpers.js';
import { mkdirp, rmrf } from '../zookeeper/helpers.js';

const servers = testServers();
const USER = 'cli-tls-user';
// Distinctive, so a hit in an argument list or an output cannot be a coincidence.
const PASSWORD = `pw-${uniqueId('secret')}`;
const CREDENTIALS = `${USER}:${PASSWORD}`;
/** No ZooKeeper settings from the test's own environment leak into a run. */
const CLEAN = { ZOOKEEPER: '', FENCEKEEPER_LOCK_SERVICE: '', ZOOKEEPER_AUTH: '', ZOOKEEPER_AUTH_FILE: '', ZOOKEEPER_TLS: '', ZOOKEEPER_TLS_CA: '', ZOOKEEPER_TLS_CERT: '', ZOOKEEPER_TLS_KEY: '', ZOOKEEPER_TLS_SERVERNAME: '' };
let scratch: string;
let authFile: string;
/** A lock whose queue parent only USER may read: `status` of it needs the credentials. */
let protectedLock: string;
let admin: ZooKeeperClient;

function tlsArgs(): string[] {
  return ['--zookeeper', servers.zkStandaloneTls, '--zookeeper-tls-ca', servers.zkTlsCa];
}

async function done(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return within(cli(args, { ...CLEAN, ...env }).done, 30_000, `fencekeeper ${args.join(' ')}`);
}

beforeAll(async () => {
  assertBuilt();
  scratch = await mkdtemp(join(tmpdir(), 'fk-cli-tls-'));
  authFile = join(scratch, 'zookeeper-auth');
  await writeFile(authFile, `${CREDENTIALS}\n`, { mode: 0o600 });
  await chmod(authFile, 0o600);
  admin = await ZooKeeperClient.connect({ connectString: servers.zkStandaloneTls, tls: { ca: readFileSync(servers.zkTlsCa) }, auth: [{ scheme: 'digest', credentials: CREDENTIALS }] });
  await mkdirp(admin, LOCKS_ROOT);
  protectedLock = uniqueLockName('cli_tls_acl');
  await admin.create(`${LOCKS_ROOT}/${protectedLock}`, null, { acl: [{ perms: Perms.ALL, id: { scheme: 'digest', id: digestAclId(USER, PASSWORD) } }] });
});

afterAll(async () => {
  await rmrf(admin, `${LOCKS_ROOT}/${protectedLock}`);
  await admin.close();
  await rm(scratch, { recursive: true, force: true });
});

describe('TLS', () => {
  it('by flag: status and run over the secure port', async () => {
    const name = uniqueLockName('cli_tls_flag');
    const status = await done(['status', name, ...tlsArgs()]);
    expect(status.stderr).toBe('');
    expect(status.code).toBe(0);
    expect(status.stdout).toContain('free');
    const run = await done(['run', name, ...tlsArgs(), '--', 'sh', '-c', 'echo "token=$FENCING_TOKEN"']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^token=\d+/);
  });

  it('by environment: ZOOKEEPER and ZOOKEEPER_TLS_CA, with the connect string or a zookeeper:// URL', async () => {
    const name = uniqueLockName('cli_tls_env');
    const env = { ZOOKEEPER: servers.zkStandaloneTls, ZOOKEEPER_TLS_CA: servers.zkTlsCa };
    const plain = await done(['status', name], env);
    expect(plain.code).toBe(0);
    const url = await done(['status', name], { ...env, ZOOKEEPER: '', FENCEKEEPER_LOCK_SERVICE: `zookeeper://${servers.zkStandaloneTls}` });
    expect(url.code).toBe(0);
    // ZOOKEEPER_TLS=1 alone: the system's roots, which do not know the test CA.
    const roots = await done(['status', name], { ZOOKEEPER: servers.zkStandaloneTls, ZOOKEEPER_TLS: '1' });
    expect(roots.code).toBe(69);
    expect(roots.stderr).toContain('TLS');
  });

  it('against the plain port: exit 69 with the TLS error, long before the connect timeout (60 s; hang guard 20 s)', async () => {
    const started = cli(['status', 'x', '--zookeeper', servers.zkStandalone, '--zookeeper-tls-ca', servers.zkTlsCa, '--session-timeout', '60000'], CLEAN);
    const result = await within(started.done, 20_000, 'fencekeeper to give up on the plain port');
    expect(result.code).toBe(69);
    expect(result.stderr).toContain('secureClientPort');
  });

  it('a wrong server name: exit 69 naming the certificate check, before the connect timeout', async () => {
    const started = cli(['status', 'x', ...tlsArgs(), '--zookeeper-tls-servername', 'zk.example.com', '--session-timeout', '60000'], CLEAN);
    const result = await within(started.done, 20_000, 'fencekeeper to give up on the host name');
    expect(result.code).toBe(69);
    expect(result.stderr).toContain('ERR_TLS_CERT_ALTNAME_INVALID');
  });

  it('a client certificate by flag or environment: the session is its x509 identity', async () => {
    const dir = dirname(servers.zkTlsCa);
    const name = uniqueLockName('cli_tls_x509');
    await admin.create(`${LOCKS_ROOT}/${name}`, null, { acl: [{ perms: Perms.ALL, id: { scheme: 'x509', id: 'CN=fencekeeper-test-client' } }] });
    try {
      const without = await done(['status', name, ...tlsArgs()]);
      expect(without.stderr).toContain('NOAUTH');
      expect(without.code).toBe(77);
      const byFlag = await done(['status', name, ...tlsArgs(), '--zookeeper-tls-cert', join(dir, 'client.pem'), '--zookeeper-tls-key', join(dir, 'client.key')]);
      expect(byFlag.stderr).toBe('');
      expect(byFlag.code).toBe(0);
      const byEnv = await done(['status', name, ...tlsArgs()], { ZOOKEEPER_TLS_CERT: join(dir, 'client.pem'), ZOOKEEPER_TLS_KEY: join(dir, 'client.key') });
      expect(byEnv.code).toBe(0);
    } finally {
      await admin.delete(`${LOCKS_ROOT}/${name}`);
    }
  });

  it('bad TLS settings are usage errors (64), found before connecting', async () => {
    const missing = await done(['status', 'x', '--zookeeper', servers.zkStandaloneTls, '--zookeeper-tls-ca', join(scratch, 'nope.pem')]);
    expect(missing.code).toBe(64);
    expect(missing.stderr).toContain('--zookeeper-tls-ca');
    expect(missing.stderr).toContain('ENOENT');
    const certOnly = await done(['status', 'x', ...tlsArgs(), '--zookeeper-tls-cert', servers.zkTlsCa]);
    expect(certOnly.code).toBe(64);
    expect(certOnly.stderr).toContain('--zookeeper-tls-key');
    const badSwitch = await done(['status', 'x', '--zookeeper', servers.zkStandaloneTls], { ZOOKEEPER_TLS: 'maybe' });
    expect(badSwitch.code).toBe(64);
  });
});

describe('digest credentials', () => {
  it('without them, the protected lock cannot be read; from ZOOKEEPER_AUTH it can (over TLS)', async () => {
    const refused = await done(['status', protectedLock, ...tlsArgs()]);
    expect(refused.code).toBe(77);
    expect(refused.stderr).toContain('NOAUTH');
    const allowed = await done(['status', protectedLock, ...tlsArgs()], { ZOOKEEPER_AUTH: CREDENTIALS });
    expect(allowed.stderr).toBe('');
    expect(allowed.code).toBe(0);
    expect(allowed.stdout).toContain('free');
  });

  it('a lock whose container carries another ACL than the run asks for: ACL_MISMATCH, exit 77 (no permission), the command never runs', async () => {
    // The container of protectedLock lets only USER do anything and nobody
    // else even read; USER's run asking for the creator ACL (USER all, anyone
    // read) must not take a lock under another ACL than it asked for.
    const marker = join(scratch, 'acl-mismatch-ran');
    const run = await done(['run', protectedLock, ...tlsArgs(), '--zookeeper-acl', 'creator', '--', 'touch', marker], { ZOOKEEPER_AUTH: CREDENTIALS });
    expect(run.stderr).toContain('ACL_MISMATCH');
    expect(run.code).toBe(77);
    expect(() => readFileSync(marker)).toThrow();
  });

  it('from a file: --zookeeper-auth-file or ZOOKEEPER_AUTH_FILE (first line)', async () => {
    const byFlag = await done(['status', protectedLock, ...tlsArgs(), '--zookeeper-auth-file', authFile]);
    expect(byFlag.code).toBe(0);
    const byEnv = await done(['status', protectedLock, ...tlsArgs()], { ZOOKEEPER_AUTH_FILE: authFile });
    expect(byEnv.code).toBe(0);
    // The wrong password is another identity, not an error: the node stays out of reach.
    const wrongFile = join(scratch, 'wrong');
    await writeFile(wrongFile, `${USER}:not-the-password\n`, { mode: 0o600 });
    const wrong = await done(['status', protectedLock, ...tlsArgs(), '--zookeeper-auth-file', wrongFile]);
    expect(wrong.stderr).toContain('NOAUTH');
  });

  it('never from a flag, and no message repeats them', async () => {
    const flag = await done(['status', protectedLock, ...tlsArgs(), '--zookeeper-auth', CREDENTIALS]);
    expect(flag.code).toBe(64);
    expect(flag.stderr).toContain('ZOOKEEPER_AUTH');
    expect(flag.stderr).toContain('--zookeeper-auth-file');
    expect(flag.stderr).not.toContain(PASSWORD);

    const malformed = `${PASSWORD}-without-a-colon`;
    const bad = await done(['status', protectedLock, ...tlsArgs()], { ZOOKEEPER_AUTH: malformed });
    expect(bad.code).toBe(64);
    expect(bad.stderr).toContain('ZOOKEEPER_AUTH');
    expect(bad.stderr).not.toContain(PASSWORD);

    const both = await done(['status', protectedLock, ...tlsArgs(), '--zookeeper-auth-file', authFile], { ZOOKEEPER_AUTH: CREDENTIALS });
    expect(both.code).toBe(64);
    expect(both.stderr).not.toContain(PASSWORD);
  });
});

/** The pids of `root` and all its descendants, from /proc. */
function processTree(root: number): number[] {
  const parents = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    parents.set(ppid, [...(parents.get(ppid) ?? []), Number(entry)]);
  }
  const out: number[] = [];
  const visit = (pid: number): void => {
    out.push(pid);
    for (const child of parents.get(pid) ?? []) visit(child);
  };
  visit(root);
  return out;
}

function commandLine(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    return '';
  }
}

describe('the credentials in the process table', () => {
  it.each([
    ['ZOOKEEPER_AUTH', (): NodeJS.ProcessEnv => ({ ZOOKEEPER_AUTH: CREDENTIALS }), (): string[] => []],
    ['--zookeeper-auth-file', (): NodeJS.ProcessEnv => ({}), (): string[] => ['--zookeeper-auth-file', authFile]],
  ])('with %s: no process of a run (fencekeeper, its supervisor, the command) has them in its arguments, nor the command in its environment', async (_how, env, args) => {
    const name = uniqueLockName('cli_tls_argv');
    // The command says when it runs, then waits for its stdin... which is closed: it sleeps instead, and is stopped below.
    const running = cli(['run', name, ...tlsArgs(), ...args(), '--', 'sh', '-c', 'echo "started auth=[${ZOOKEEPER_AUTH:-}] file=[${ZOOKEEPER_AUTH_FILE:-}]"; exec sleep 30'], { ...CLEAN, ...env() });
    try {
      await within(
        new Promise<void>((resolve) => {
          const check = (): void => {
            if (running.stdout().includes('started')) resolve();
            else setTimeout(check, 20);
          };
          check();
        }),
        20_000,
        'the command to start under the lock',
      );
      const pids = processTree(running.child.pid!);
      // fencekeeper, the supervisor, sh/sleep: the whole run was looked at.
      expect(pids.length).toBeGreaterThanOrEqual(3);
      const lines = pids.map(commandLine);
      expect(lines.some((l) => l.includes('sleep 30'))).toBe(true);
      for (const line of lines) expect(line).not.toContain(PASSWORD);
      // The credentials are fencekeeper's, not the command's: it sees neither variable.
      expect(running.stdout()).toContain('started auth=[] file=[]');
      // The run holds the lock with an authenticated session (the holder's entry is there).
      const status = await done(['status', name, ...tlsArgs(), '--json']);
      expect(JSON.parse(status.stdout).queue).toHaveLength(1);
    } finally {
      running.child.kill('SIGTERM');
    }
    const result = await within(running.done, 20_000, 'fencekeeper run to stop on SIGTERM');
    expect(result.stdout + result.stderr).not.toContain(PASSWORD);
  });
});
