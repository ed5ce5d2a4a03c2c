// What goes wrong with TLS, and how soon the caller hears of it. A
// certificate that does not verify (another CA, another host name) and a
// TLS client dialling a plain client port are configuration errors no retry
// can fix: connect() must reject with TLS_FAILED at once, not retry until
// its connect timeout. The timeout here is 60 s and each test's hang guard
// 20 s, so an error that came from the timeout cannot pass. A plain client
// dialling the secure port cannot tell that from a server that is not
// serving yet; it gives up at its connect timeout, naming the port.
// Digest authentication works on top of TLS.
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { TlsError } from '../../../src/errors.js';
import { ZooKeeperClient, digestAclId, type ConnectOptions } from '../../../src/sources/zookeeper/client.js';
import { Perms } from '../../../src/sources/zookeeper/protocol.js';
import { parseConnectString } from '../../../src/sources/zookeeper/paths.js';
import { tlsConnector } from '../../../src/sources/zookeeper/tls.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { within } from '../../helpers/wait.js';
import { ClientPool } from '../../helpers/zookeeper.js';
import { mkdirp, namespace, rmrf } from './helpers.js';

const servers = testServers();
const pool = new ClientPool();
const root = namespace('zktlsfail');
const CONNECT_TIMEOUT_MS = 60_000;
const HANG_GUARD_MS = 20_000;
let ca: Buffer;
let otherCa: Buffer;
let scratch: string;

beforeAll(async () => {
  ca = await readFile(servers.zkTlsCa);
  // A CA of its own that signed nothing the servers present.
  scratch = await mkdtemp(join(tmpdir(), 'fk-tls-other-ca-'));
  await promisify(execFile)('openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
    '-subj', '/CN=another CA', '-keyout', join(scratch, 'key.pem'), '-out', join(scratch, 'ca.pem'),
  ]);
  otherCa = await readFile(join(scratch, 'ca.pem'));
  const admin = await ZooKeeperClient.connect({ connectString: servers.zkStandaloneTls, tls: { ca } });
  await mkdirp(admin, root);
  await admin.close();
});

afterEach(async () => {
  await pool.closeAll();
});

afterAll(async () => {
  const admin = await ZooKeeperClient.connect({ connectString: servers.zkStandaloneTls, tls: { ca } });
  await rmrf(admin, root);
  await admin.close();
  await rm(scratch, { recursive: true, force: true });
});

/** connect()'s rejection, or a hang-guard error naming what hung (which fails the assertions on it). */
async function connectError(options: ConnectOptions): Promise<Error & { code?: string; retryable?: boolean }> {
  const outcome = await within(
    ZooKeeperClient.connect({ connectTimeoutMs: CONNECT_TIMEOUT_MS, ...options }).then(
      async (zk) => {
        await zk.close();
        return new Error('connected, but it should have failed');
      },
      (error: unknown) => error as Error,
    ),
    HANG_GUARD_MS,
    `connect() to ${options.connectString} to fail`,
  ).catch((error: unknown) => error as Error);
  return outcome;
}

describe('a TLS connect that cannot succeed fails at once, long before the connect timeout', () => {
  it('a TLS client against the plain client port: TLS_FAILED, naming the secure port as the likely fix', async () => {
    const error = await connectError({ connectString: servers.zkStandalone, tls: { ca } });
    expect(error).toBeInstanceOf(TlsError);
    expect(error).toMatchObject({ code: 'TLS_FAILED', retryable: false });
    expect(error.message).toContain(servers.zkStandalone);
    expect(error.message).toContain('secureClientPort');
  });

  it('a server certificate from another CA: TLS_FAILED, with the verification error', async () => {
    const error = await connectError({ connectString: servers.zkStandaloneTls, tls: { ca: otherCa } });
    expect(error).toMatchObject({ code: 'TLS_FAILED', retryable: false });
    expect(error.message).toContain('SELF_SIGNED_CERT_IN_CHAIN');
  });

  it("no CA given: Node's bundled roots do not know the test CA either", async () => {
    const error = await connectError({ connectString: servers.zkStandaloneTls, tls: {} });
    expect(error).toMatchObject({ code: 'TLS_FAILED', retryable: false });
  });

  it('a host name the certificate does not carry: TLS_FAILED (ERR_TLS_CERT_ALTNAME_INVALID)', async () => {
    const error = await connectError({ connectString: servers.zkStandaloneTls, tls: { ca, servername: 'zk.example.com' } });
    expect(error).toMatchObject({ code: 'TLS_FAILED', retryable: false });
    expect(error.message).toContain('ERR_TLS_CERT_ALTNAME_INVALID');
    expect(error.message).toContain('zk.example.com');
  });

  it('on an ensemble: the first certificate that fails ends the connect, no other server is tried for the timeout', async () => {
    const error = await connectError({ connectString: servers.zkEnsembleTls, tls: { ca: otherCa } });
    expect(error).toMatchObject({ code: 'TLS_FAILED', retryable: false });
  });

  it('the host names the certificate carries pass: localhost and 127.0.0.1', async () => {
    const port = servers.zkStandaloneTls.slice(servers.zkStandaloneTls.lastIndexOf(':') + 1);
    for (const host of ['localhost', '127.0.0.1']) {
      const zk = await pool.connect({ connectString: `${host}:${port}`, tls: { ca } });
      expect(await zk.exists('/')).not.toBeNull();
    }
  });
});

describe("the plain port's hang-up", () => {
  it('is final only until the connector has completed a handshake: afterwards it is a connection loss to retry', async () => {
    const [secure] = parseConnectString(servers.zkStandaloneTls).servers;
    const [plain] = parseConnectString(servers.zkStandalone).servers;
    const signal = new AbortController().signal;

    const fresh = tlsConnector({ ca });
    await expect(fresh(plain!, { signal })).rejects.toMatchObject({ code: 'TLS_FAILED', retryable: false });

    const proven = tlsConnector({ ca });
    const stream = await proven(secure!, { signal });
    stream.destroy();
    const error = (await Promise.resolve(proven(plain!, { signal })).catch((e: unknown) => e)) as Error & { code?: string };
    expect(error).not.toBeInstanceOf(TlsError);
    expect(error.code).toBe('ECONNRESET');
  });
});

describe('a plain-text client against the secure port', () => {
  it('gives up at its connect timeout with a connection loss that names the port', async () => {
    const error = await connectError({ connectString: servers.zkStandaloneTls, connectTimeoutMs: 2000 });
    expect(error).toMatchObject({ code: 'CONNECTION_LOSS' });
    expect(error.message).toContain(`no ZooKeeper server at ${servers.zkStandaloneTls} accepted a session within 2000 ms`);
    expect(error.message).toContain('closed');
    expect(error.message).toContain('tls option');
  });
});

describe('a client certificate', () => {
  it('authenticates the session as its subject (x509): a node ACL\'d to it is readable with the certificate, not without', async () => {
    // zk-certs.sh puts the client certificate beside the CA.
    const dir = dirname(servers.zkTlsCa);
    const cert = await readFile(join(dir, 'client.pem'));
    const key = await readFile(join(dir, 'client.key'));
    const path = `${root}/${uniqueId('x509')}`;
    const owner = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca, cert, key } });
    await owner.create(path, 'by certificate', { acl: [{ perms: Perms.ALL, id: { scheme: 'x509', id: 'CN=fencekeeper-test-client' } }] });
    const stranger = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca } });
    await expect(stranger.getData(path)).rejects.toMatchObject({ code: 'ZK_NOAUTH' });
    const again = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca, cert, key } });
    expect(Buffer.from((await again.getData(path)).data).toString()).toBe('by certificate');
    await again.delete(path);
  });
});

describe('digest authentication over TLS', () => {
  it('an authenticated client owns its node; without the credentials the node is out of reach', async () => {
    const path = `${root}/${uniqueId('digest')}`;
    const credentials = 'tls-user:s3cret';
    const owner = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca }, auth: [{ scheme: 'digest', credentials }] });
    await owner.create(path, 'private', { acl: [{ perms: Perms.ALL, id: { scheme: 'digest', id: digestAclId('tls-user', 's3cret') } }] });

    const stranger = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca } });
    await expect(stranger.getData(path)).rejects.toMatchObject({ code: 'ZK_NOAUTH' });
    const wrong = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca }, auth: [{ scheme: 'digest', credentials: 'tls-user:wrong' }] });
    await expect(wrong.getData(path)).rejects.toMatchObject({ code: 'ZK_NOAUTH' });

    const again = await pool.connect({ connectString: servers.zkStandaloneTls, tls: { ca }, auth: [{ scheme: 'digest', credentials }] });
    expect(Buffer.from((await again.getData(path)).data).toString()).toBe('private');
    await again.delete(path);
  });
});
