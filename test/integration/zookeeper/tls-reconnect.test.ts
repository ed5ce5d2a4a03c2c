// A TLS ensemble with one member whose certificate comes from another CA, as
// after a botched certificate rotation on one server: a client whose
// session lives on a healthy member loses that member and, reconnecting,
// meets the bad one. The certificate failure must not end the live session
// while a healthy member remains: the client skips that member and resumes
// on the next one, and its lock stays held. Only when no member verifies for
// the whole session timeout does the session go, and then every loss carries
// the TLS error as its cause (the first connect() still fails at once, as
// zk-tls-failures.test.ts shows).
//
// The bad member is a TLS endpoint this test owns, with a certificate of a
// throwaway CA (for 127.0.0.1, valid in every other way), in front of a real
// member's plain client port; the healthy members are reached through
// proxies of the test's own, so losing "the current server" is closing its
// proxy, and no real server is faulted (the ensemble turn is held only so
// that no other file's leader kill lands in the middle).
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LockLostError, SessionExpiredError, TlsError } from '../../../src/errors.js';
import { acquireLock, lockStatus } from '../../../src/sources/zookeeper/recipes/lock.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { testServers, useEnsembleForFaults } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { until, within } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';

const servers = testServers();
const pool = new ClientPool();
useEnsembleForFaults();

const [secure1, , secure3] = servers.zkEnsembleTls.split(',') as [string, string, string];
const [, plain2] = servers.zkEnsemble.split(',') as [string, string, string];
let ca: Buffer;
let scratch: string;
let badMember: BadMember;
const closers: (() => Promise<void>)[] = [];

/** A member with a certificate of another CA: TLS with it, then its bytes to a real member's plain port. */
interface BadMember {
  readonly address: string;
  /** Connections accepted (each one a client that went on to refuse its certificate). */
  readonly dialled: number;
  close(): Promise<void>;
}

async function startBadMember(key: Buffer, cert: Buffer, upstream: string): Promise<BadMember> {
  const at = upstream.lastIndexOf(':');
  let dialled = 0;
  const sockets = new Set<net.Socket>();
  const server = tls.createServer({ key, cert }, (client) => {
    const member = net.connect({ host: upstream.slice(0, at), port: Number(upstream.slice(at + 1)) });
    client.pipe(member).pipe(client);
    for (const s of [client, member]) {
      sockets.add(s);
      s.on('error', () => s.destroy());
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        member.destroy();
      });
    }
  });
  server.on('connection', (socket: net.Socket) => {
    dialled++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    get dialled() {
      return dialled;
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * A TCP forwarder whose target can be changed: a member that is healthy
 * first, and whose certificate stops verifying later (`to(bad)`, its
 * connections reset).
 */
async function switchable(initial: string): Promise<{ address: string; to(target: string): void; close(): Promise<void> }> {
  let target = initial;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const at = target.lastIndexOf(':');
    const upstream = net.connect({ host: target.slice(0, at), port: Number(target.slice(at + 1)) });
    client.pipe(upstream).pipe(client);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => s.destroy());
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    to(next) {
      target = next;
      for (const s of sockets) s.resetAndDestroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

beforeAll(async () => {
  ca = await readFile(servers.zkTlsCa);
  scratch = await mkdtemp(join(tmpdir(), 'fk-tls-bad-member-'));
  const run = (args: string[]): Promise<unknown> => promisify(execFile)('openssl', args, { cwd: scratch });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  await run(['req', '-x509', ...ec, '-days', '1', '-subj', '/CN=another CA', '-keyout', 'other-ca.key', '-out', 'other-ca.pem']);
  await run(['req', ...ec, '-subj', '/CN=127.0.0.1', '-keyout', 'member.key', '-out', 'member.csr']);
  await writeFile(join(scratch, 'member.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  await run([
    'x509', '-req', '-in', 'member.csr', '-CA', 'other-ca.pem', '-CAkey', 'other-ca.key', '-set_serial', '1', '-days', '1',
    '-extfile', 'member.ext', '-out', 'member.pem',
  ]);
  const cert = Buffer.concat([await readFile(join(scratch, 'member.pem')), await readFile(join(scratch, 'other-ca.pem'))]);
  badMember = await startBadMember(await readFile(join(scratch, 'member.key')), cert, plain2);
}, 60_000);

afterEach(async () => {
  await pool.closeAll();
  for (const close of closers.splice(0)) await close();
});

afterAll(async () => {
  await badMember?.close();
  if (scratch !== undefined) await rm(scratch, { recursive: true, force: true });
});

describe('a TLS reconnect that meets a member whose certificate does not verify', () => {
  it('skips it and resumes the session on a healthy member: the lock stays held', async () => {
    const first = await TcpProxy.to(secure1);
    const last = await TcpProxy.to(secure3);
    closers.push(() => first.close(), () => last.close());
    // Tried in order: the healthy first member, then (after its loss) the bad one, then the last.
    const zk = await pool.connect({ connectString: [first.address, badMember.address, last.address].join(','), sessionTimeoutMs: 8000, tls: { ca } });
    const session = zk.sessionId;
    const name = uniqueLockName('tls_bad_member');
    const lock = await acquireLock(zk, name);
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    const dialledBefore = badMember.dialled;

    await first.close();
    await until(() => states.includes('suspended'), 'the client to lose its server', 20_000);
    await until(() => zk.state !== 'suspended', 'the client to leave the suspended state', 20_000);
    // The reconnect met the bad member, then went on.
    expect(badMember.dialled).toBeGreaterThan(dialledBefore);
    expect(zk.state).toBe('connected');
    expect(states).toEqual(['suspended', 'connected']);
    expect(zk.sessionId).toBe(session);
    expect(last.connectionCount).toBe(1);

    expect(lock.held).toBe(true);
    expect(lock.signal.aborted).toBe(false);
    await zk.sync('/');
    expect((await lockStatus(zk, name)).holder?.token).toBe(lock.token);
    await lock.release();
    expect((await lockStatus(zk, name)).holder).toBeNull();
  });

  it('when no member verifies for the session timeout, the session goes, and every loss carries the TLS error as its cause', async () => {
    const member = await switchable(secure1);
    closers.push(() => member.close());
    const zk = await pool.connect({ connectString: [member.address, badMember.address].join(','), sessionTimeoutMs: 4000, tls: { ca } });
    const lock = await acquireLock(zk, uniqueLockName('tls_no_member'));
    const lost = new Promise<unknown>((resolve) => lock.signal.addEventListener('abort', () => resolve(lock.signal.reason), { once: true }));

    // The healthy member now presents the other CA's certificate too.
    member.to(badMember.address);
    await until(() => zk.state !== 'connected', 'the client to lose its server', 20_000);
    // Issued while suspended: it waits for a reconnect that never comes.
    const queued = zk.exists('/').then(() => null, (error: unknown) => error);

    const lockError = (await within(lost, 30_000, 'the lock lost')) as LockLostError;
    expect(lockError).toBeInstanceOf(LockLostError);
    expect(lockError.cause).toBeInstanceOf(TlsError);
    expect(lockError.cause).toMatchObject({ code: 'TLS_FAILED' });
    expect(lockError.message).toContain('TLS');

    const requestError = (await within(queued, 30_000, 'the queued request failing')) as SessionExpiredError;
    expect(zk.state).toBe('expired');
    expect(requestError).toBeInstanceOf(SessionExpiredError);
    expect(requestError.cause).toBeInstanceOf(TlsError);
    expect(requestError.message).toContain('TLS to 127.0.0.1');

    const refused = await lock.ifHeld([{ op: 'check', path: '/', version: -1 }]).then(() => null, (error: unknown) => error);
    expect(refused).toBeInstanceOf(LockLostError);
    expect((refused as LockLostError).cause).toBeInstanceOf(TlsError);
  });
});
