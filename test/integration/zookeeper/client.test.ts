// Every operation of the wire client against a real standalone ZooKeeper.
import { describe, expect, it } from 'vitest';
import { ClientClosedError, InvalidArgumentError, ZooKeeperError } from '../../../src/errors.js';
import { ZooKeeperClient, digestAclId } from '../../../src/sources/zookeeper/client.js';
import { CREATOR_ALL_ACL, MAX_PACKET_BYTES, OPEN_ACL_UNSAFE, Perms, READ_ACL_UNSAFE } from '../../../src/sources/zookeeper/protocol.js';
import type { WatchEvent } from '../../../src/sources/zookeeper/watches.js';
import { StandaloneFile } from '../../helpers/zookeeper-file.js';
import { RequestCounter, fileNamespace, watcherSpy } from './helpers.js';

// the admin client's session: the client's default
const file = new StandaloneFile(10_000);
const pool = file.clients;
const root = fileNamespace(file, 'zkclient');
let testIndex = 0;
/** A fresh, existing node for one test. */
let base: string;

const connect = (extra: { sessionTimeoutMs?: number; auth?: { scheme: 'digest'; credentials: string }[]; chroot?: string } = {}) =>
  pool.connect({
    connectString: file.server + (extra.chroot ?? ''),
    sessionTimeoutMs: extra.sessionTimeoutMs ?? 10_000,
    ...(extra.auth && { auth: extra.auth }),
  });

function zkCode(error: unknown): string | undefined {
  return error instanceof ZooKeeperError ? error.code : undefined;
}

beforeEach(async () => {
  base = `${root}/t${testIndex++}`;
  await file.admin.create(base);
});

import { beforeEach } from 'vitest';
import { until } from '../../helpers/wait.js';
import { fourLetterWord } from '../../helpers/zookeeper.js';

describe('create', () => {
  it('persistent: returns the path and a Stat whose czxid is a bigint', async () => {
    const zk = await connect();
    const { path, stat } = await zk.create(`${base}/p`, 'hello');
    expect(path).toBe(`${base}/p`);
    expect(typeof stat.czxid).toBe('bigint');
    expect(stat.czxid).toBeGreaterThan(0n);
    expect(stat.mzxid).toBe(stat.czxid);
    expect(stat.ephemeralOwner).toBe(0n);
    expect(stat.dataLength).toBe(5);
    expect(stat.version).toBe(0);
    const seen = await file.admin.exists(`${base}/p`);
    expect(seen?.czxid).toBe(stat.czxid);
    expect(typeof seen?.ctime).toBe('number');
  });

  it('persistent_sequential: the server appends a 10-digit counter', async () => {
    const zk = await connect();
    const a = await zk.create(`${base}/s-`, null, { mode: 'persistent_sequential' });
    const b = await zk.create(`${base}/s-`, null, { mode: 'persistent_sequential' });
    expect(a.path).toMatch(new RegExp(`^${base}/s-\\d{10}$`));
    expect(b.path > a.path).toBe(true);
    expect(b.stat.czxid).toBeGreaterThan(a.stat.czxid);
    // A sequential create may end with '/': the name is the counter alone.
    const c = await zk.create(`${base}/`, null, { mode: 'persistent_sequential' });
    expect(c.path).toMatch(new RegExp(`^${base}/\\d{10}$`));
  });

  it('ephemeral and ephemeral_sequential: owned by this session', async () => {
    const zk = await connect();
    const e = await zk.create(`${base}/e`, null, { mode: 'ephemeral' });
    const es = await zk.create(`${base}/es-`, null, { mode: 'ephemeral_sequential' });
    expect(e.stat.ephemeralOwner).toBe(zk.sessionId);
    expect(es.stat.ephemeralOwner).toBe(zk.sessionId);
    expect(es.path).toMatch(/es-\d{10}$/);
    await expect(zk.create(`${base}/e/child`)).rejects.toMatchObject({ code: 'ZK_NOCHILDRENFOREPHEMERALS' });
  });

  it('container', async () => {
    const zk = await connect();
    const { path, stat } = await zk.create(`${base}/c`, 'x', { mode: 'container' });
    expect(path).toBe(`${base}/c`);
    expect(typeof stat.czxid).toBe('bigint');
    // The server keeps Long.MIN_VALUE (EphemeralType.CONTAINER) but shows clients 0 (DataTree.getClientEphemeralOwner).
    expect(stat.ephemeralOwner).toBe(0n);
    expect((await file.admin.exists(path))?.czxid).toBe(stat.czxid);
  });

  it('persistent_with_ttl and persistent_sequential_with_ttl', async () => {
    const zk = await connect();
    const t = await zk.create(`${base}/ttl`, 'x', { mode: 'persistent_with_ttl', ttlMs: 60_000 });
    const ts = await zk.create(`${base}/ttls-`, 'x', { mode: 'persistent_sequential_with_ttl', ttlMs: 60_000 });
    expect(t.path).toBe(`${base}/ttl`);
    expect(ts.path).toMatch(/ttls-\d{10}$/);
    expect(typeof t.stat.czxid).toBe('bigint');
    // Like a container, a TTL node shows clients ephemeralOwner 0.
    expect(t.stat.ephemeralOwner).toBe(0n);
    expect((await file.admin.exists(ts.path))?.czxid).toBe(ts.stat.czxid);
  });

  it('ttl options are checked on the client', async () => {
    const zk = await connect();
    await expect(zk.create(`${base}/x`, null, { mode: 'persistent_with_ttl' })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.create(`${base}/x`, null, { mode: 'persistent', ttlMs: 5 })).rejects.toBeInstanceOf(InvalidArgumentError);
    // Regression: a mode named like an Object.prototype member passed the lookup.
    for (const mode of ['toString', 'constructor', 'bogus']) {
      await expect(zk.create(`${base}/x`, null, { mode: mode as 'persistent' })).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(zk.multi([{ op: 'create', path: `${base}/x`, mode: mode as 'persistent' }])).rejects.toBeInstanceOf(InvalidArgumentError);
    }
  });

  it('NODEEXISTS and NONODE parent', async () => {
    const zk = await connect();
    await zk.create(`${base}/dup`);
    const dup = await zk.create(`${base}/dup`).catch((e: unknown) => e);
    expect(dup).toBeInstanceOf(ZooKeeperError);
    expect(dup).toMatchObject({ code: 'ZK_NODEEXISTS', zkCode: -110, path: `${base}/dup` });
    expect(zkCode(await zk.create(`${base}/missing/child`).catch((e: unknown) => e))).toBe('ZK_NONODE');
  });
});

describe('delete, exists, getData, setData', () => {
  it('delete with a version; BADVERSION leaves the node', async () => {
    const zk = await connect();
    await zk.create(`${base}/d`);
    await zk.setData(`${base}/d`, 'v1');
    expect(zkCode(await zk.delete(`${base}/d`, 0).catch((e: unknown) => e))).toBe('ZK_BADVERSION');
    expect(await zk.exists(`${base}/d`)).not.toBeNull();
    await zk.delete(`${base}/d`, 1);
    expect(await zk.exists(`${base}/d`)).toBeNull();
    expect(zkCode(await zk.delete(`${base}/d`).catch((e: unknown) => e))).toBe('ZK_NONODE');
  });

  it('delete of a node with children: NOTEMPTY', async () => {
    const zk = await connect();
    await zk.create(`${base}/parent`);
    await zk.create(`${base}/parent/child`);
    expect(zkCode(await zk.delete(`${base}/parent`).catch((e: unknown) => e))).toBe('ZK_NOTEMPTY');
  });

  it('exists answers null for a missing node', async () => {
    const zk = await connect();
    expect(await zk.exists(`${base}/nope`)).toBeNull();
  });

  it('getData and setData with versions', async () => {
    const zk = await connect();
    await zk.create(`${base}/n`, new Uint8Array([1, 2, 3]));
    const first = await zk.getData(`${base}/n`);
    expect([...first.data]).toEqual([1, 2, 3]);
    expect(first.stat.version).toBe(0);
    const stat = await zk.setData(`${base}/n`, 'héllo', 0);
    expect(stat.version).toBe(1);
    expect(stat.mzxid).toBeGreaterThan(first.stat.mzxid);
    expect(zkCode(await zk.setData(`${base}/n`, 'x', 0).catch((e: unknown) => e))).toBe('ZK_BADVERSION');
    const second = await zk.getData(`${base}/n`);
    expect(Buffer.from(second.data).toString('utf8')).toBe('héllo');
    expect(second.stat.version).toBe(1);
    await zk.setData(`${base}/n`, null);
    expect((await zk.getData(`${base}/n`)).data.byteLength).toBe(0);
    expect(zkCode(await zk.getData(`${base}/missing`).catch((e: unknown) => e))).toBe('ZK_NONODE');
  });
});

describe('children, multi, ephemerals, ACLs, sync', () => {
  it('getChildren and getChildrenWithStat', async () => {
    const zk = await connect();
    for (const name of ['a', 'b', 'ç']) await zk.create(`${base}/${name}`);
    expect((await zk.getChildren(base)).sort()).toEqual(['a', 'b', 'ç']);
    const { children, stat } = await zk.getChildrenWithStat(base);
    expect(children.sort()).toEqual(['a', 'b', 'ç']);
    expect(stat.numChildren).toBe(3);
    expect(stat.cversion).toBe(3);
    expect(await zk.getChildren(`${base}/a`)).toEqual([]);
  });

  it('multi: results of every op', async () => {
    const zk = await connect();
    await zk.create(`${base}/old`, 'o');
    const results = await zk.multi([
      { op: 'create', path: `${base}/m`, data: 'x' },
      { op: 'create', path: `${base}/m/seq-`, mode: 'persistent_sequential' },
      { op: 'setData', path: `${base}/old`, data: 'new', version: 0 },
      { op: 'check', path: `${base}/old`, version: 1 },
      { op: 'delete', path: `${base}/old`, version: 1 },
    ]);
    expect(results.map((r) => r.op)).toEqual(['create', 'create', 'setData', 'check', 'delete']);
    expect(results[0]).toMatchObject({ op: 'create', path: `${base}/m` });
    expect((results[1] as { path: string }).path).toMatch(/\/m\/seq-\d{10}$/);
    expect((results[2] as { stat: { version: number } }).stat.version).toBe(1);
    expect(await zk.exists(`${base}/old`)).toBeNull();
    expect(await zk.getChildren(`${base}/m`)).toHaveLength(1);
  });

  it('multi: a failing op rejects with its ZooKeeperError and opIndex, and nothing is applied', async () => {
    const zk = await connect();
    await zk.create(`${base}/keep`, 'k');
    const error = await zk
      .multi([
        { op: 'create', path: `${base}/new1` },
        { op: 'setData', path: `${base}/keep`, data: 'changed' },
        { op: 'delete', path: `${base}/keep`, version: 7 },
        { op: 'create', path: `${base}/new2` },
      ])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ZooKeeperError);
    expect(error).toMatchObject({ code: 'ZK_BADVERSION', opIndex: 2, path: `${base}/keep` });
    expect(await zk.exists(`${base}/new1`)).toBeNull();
    expect(await zk.exists(`${base}/new2`)).toBeNull();
    expect(Buffer.from((await zk.getData(`${base}/keep`)).data).toString()).toBe('k');
    // The connection survived the failed multi.
    expect(await zk.exists(`${base}/keep`)).not.toBeNull();
  });

  it('multi: a failing check', async () => {
    const zk = await connect();
    await zk.create(`${base}/c`);
    await expect(zk.multi([{ op: 'check', path: `${base}/c`, version: 3 }, { op: 'create', path: `${base}/z` }])).rejects.toMatchObject({
      code: 'ZK_BADVERSION',
      opIndex: 0,
    });
    await expect(zk.multi([{ op: 'create', path: `${base}/z` }, { op: 'check', path: `${base}/nope`, version: 0 }])).rejects.toMatchObject({
      code: 'ZK_NONODE',
      opIndex: 1,
    });
    expect(await zk.exists(`${base}/z`)).toBeNull();
  });

  it('getEphemerals lists this session\'s ephemeral nodes only', async () => {
    const zk = await connect();
    const other = await connect();
    await zk.create(`${base}/e1`, null, { mode: 'ephemeral' });
    const seq = await zk.create(`${base}/e2-`, null, { mode: 'ephemeral_sequential' });
    await zk.create(`${base}/p`);
    await other.create(`${base}/theirs`, null, { mode: 'ephemeral' });
    expect((await zk.getEphemerals(base)).sort()).toEqual([`${base}/e1`, seq.path].sort());
    expect(await other.getEphemerals(base)).toEqual([`${base}/theirs`]);
  });

  it('getACL and setACL', async () => {
    const zk = await connect();
    await zk.create(`${base}/acl`, 'x');
    const before = await zk.getACL(`${base}/acl`);
    expect(before.acl).toEqual(OPEN_ACL_UNSAFE);
    expect(before.stat.aversion).toBe(0);
    const stat = await zk.setACL(`${base}/acl`, READ_ACL_UNSAFE, 0);
    expect(stat.aversion).toBe(1);
    expect((await zk.getACL(`${base}/acl`)).acl).toEqual(READ_ACL_UNSAFE);
    expect(zkCode(await zk.setData(`${base}/acl`, 'y').catch((e: unknown) => e))).toBe('ZK_NOAUTH');
    expect(zkCode(await zk.setACL(`${base}/acl`, OPEN_ACL_UNSAFE, 0).catch((e: unknown) => e))).toBe('ZK_NOAUTH');
  });

  it('sync reaches the server as a sync, and its reply is matched', async () => {
    const zk = await connect();
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    // The server's own record of this connection (cons): the last operation
    // it processed for us and that request's xid. A sync that sends nothing,
    // or sends something else, leaves a different record.
    const lastOperation = async (): Promise<string | undefined> => {
      const line = (await fourLetterWord(file.server, 'cons')).split('\n').find((l) => l.includes(`sid=0x${zk.sessionId.toString(16)},`));
      const match = /lop=(\w+),.*lcxid=(0x[0-9a-f]+),/.exec(line ?? '');
      return match ? `${match[1]} ${match[2]}` : line;
    };
    await zk.exists(base);
    expect(await lastOperation()).toBe('EXIS 0x1');
    await expect(zk.sync(base)).resolves.toBeUndefined();
    expect(await lastOperation()).toBe('SYNC 0x2');
    await expect(zk.sync()).resolves.toBeUndefined();
    expect(await lastOperation()).toBe('SYNC 0x3');
    // Replies after it still match their requests on the same connection.
    expect((await zk.exists(base))?.czxid).toBe((await file.admin.exists(base))?.czxid);
    expect(await lastOperation()).toBe('EXIS 0x4');
    expect(states).toEqual([]);
  });
});

describe('chroot', () => {
  it('paths, create results, ephemerals, multi and watch events are relative to the chroot', async () => {
    const zk = await connect({ chroot: base });
    expect(zk.chroot).toBe(base);
    const created = await zk.create('/a', 'x');
    expect(created.path).toBe('/a');
    const seq = await zk.create('/s-', null, { mode: 'ephemeral_sequential' });
    expect(seq.path).toMatch(/^\/s-\d{10}$/);
    expect(await file.admin.exists(`${base}/a`)).not.toBeNull();
    expect((await zk.getChildren('/')).sort()).toEqual(['a', seq.path.slice(1)].sort());
    expect(await zk.getEphemerals('/')).toEqual([seq.path]);
    const results = await zk.multi([{ op: 'create', path: '/m' }]);
    expect(results[0]).toMatchObject({ op: 'create', path: '/m' });
    expect((await zk.exists('/'))?.numChildren).toBe(3);

    const data = watcherSpy<WatchEvent>();
    const child = watcherSpy<WatchEvent>();
    await zk.getData('/a', { watch: data.fn });
    await zk.getChildren('/', { watch: child.fn });
    await file.admin.setData(`${base}/a`, 'changed');
    await file.admin.create(`${base}/b`);
    expect(await data.next).toEqual({ type: 'dataChanged', path: '/a' });
    expect(await child.next).toEqual({ type: 'childrenChanged', path: '/' });
  });
});

describe('connectString as a zookeeper:// URL (the CLI\'s form)', () => {
  it('hosts and a chroot: the same session as the plain connect string', async () => {
    const zk = await pool.connect({ connectString: `zookeeper://${file.server}${base}`, sessionTimeoutMs: 10_000 });
    expect(zk.chroot).toBe(base);
    await zk.create('/via-url', 'x');
    expect(await file.admin.exists(`${base}/via-url`)).not.toBeNull();
    const rootOnly = await pool.connect({ connectString: `ZooKeeper://${file.server}/`, sessionTimeoutMs: 10_000 });
    expect(rootOnly.chroot).toBe('');
    expect(await rootOnly.exists(`${base}/via-url`)).not.toBeNull();
  });

  it('another scheme, credentials or a query: InvalidArgumentError before any connection', async () => {
    for (const connectString of [`redis://${file.server}`, `http://${file.server}`, `zookeeper://user:pw@${file.server}`, `zookeeper://${file.server}?x=1`]) {
      const error = await ZooKeeperClient.connect({ connectString }).then(() => undefined, (e: unknown) => e);
      expect(error, connectString).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message).toMatch(/zookeeper:\/\/host:port|hosts and an optional chroot only/);
    }
  });
});

describe('sessions and close', () => {
  it('ephemeral nodes vanish as soon as close() resolves, seen from a second client', async () => {
    // A long session timeout: the nodes must go because of closeSession, not expiry.
    const owner = await connect({ sessionTimeoutMs: 30_000 });
    const observer = await connect();
    await owner.create(`${base}/e`, null, { mode: 'ephemeral' });
    const gone = watcherSpy<WatchEvent>();
    expect(await observer.exists(`${base}/e`, { watch: gone.fn })).not.toBeNull();
    await owner.close();
    expect(owner.state).toBe('closed');
    expect(await observer.exists(`${base}/e`)).toBeNull();
    expect(await gone.next).toEqual({ type: 'deleted', path: `${base}/e` });
  });

  it('requests after close() fail with ClientClosedError; requests issued before it are answered', async () => {
    const zk = await connect();
    const before = zk.exists(base);
    const closing = zk.close();
    await expect(zk.exists(base)).rejects.toBeInstanceOf(ClientClosedError);
    expect(await before).not.toBeNull();
    await closing;
    await expect(zk.create(`${base}/x`)).rejects.toBeInstanceOf(ClientClosedError);
    await expect(zk.close()).resolves.toBeUndefined();
  });

  it("the negotiated timeout is reported: the server's minimum for a tiny request, its maximum for a huge one", async () => {
    // The server's bounds as it applies them (conf): minSessionTimeout and
    // maxSessionTimeout, 2 and 20 x tickTime unless configured.
    const conf = await fourLetterWord(file.server, 'conf');
    const setting = (name: string): number => Number(new RegExp(`^${name}=(\\d+)$`, 'm').exec(conf)?.[1]);
    const [tickTime, min, max] = [setting('tickTime'), setting('minSessionTimeout'), setting('maxSessionTimeout')];
    expect(tickTime).toBeGreaterThan(0);
    expect(min).toBeGreaterThanOrEqual(2 * tickTime);
    expect(max).toBeGreaterThan(min);

    const tiny = await pool.connect({ connectString: file.server, sessionTimeoutMs: 1, connectTimeoutMs: 10_000 });
    expect(tiny.sessionTimeoutMs).toBe(min);
    expect(tiny.sessionDeadline).toBe(tiny.lastAckedSendTime + min);
    expect(tiny.sessionId).not.toBe(0n);
    expect(tiny.state).toBe('connected');
    const huge = await pool.connect({ connectString: file.server, sessionTimeoutMs: 0x7fffffff, connectTimeoutMs: 10_000 });
    expect(huge.sessionTimeoutMs).toBe(max);
    // The server holds the same figure for each session (cons: to=).
    const cons = await fourLetterWord(file.server, 'cons');
    for (const zk of [tiny, huge]) {
      expect(cons).toMatch(new RegExp(`sid=0x${zk.sessionId.toString(16)},.*,to=${zk.sessionTimeoutMs},`));
    }
  });

  it('lastAckedSendTime and sessionDeadline advance with replies, pings included', async () => {
    const zk = await connect({ sessionTimeoutMs: 4000 });
    const t0 = zk.lastAckedSendTime;
    expect(t0).toBeGreaterThan(0);
    expect(zk.sessionDeadline).toBe(t0 + zk.sessionTimeoutMs);
    const { performance } = await import('node:perf_hooks');
    const beforeRequest = performance.now();
    await zk.exists(base);
    const t1 = zk.lastAckedSendTime;
    expect(t1).toBeGreaterThanOrEqual(beforeRequest);
    expect(zk.sessionDeadline).toBe(t1 + zk.sessionTimeoutMs);
    // Idle: only the heartbeat's pings can move it now.
    await until(() => zk.lastAckedSendTime > t1, 'a ping reply to advance lastAckedSendTime', zk.sessionTimeoutMs * 2);
    expect(zk.sessionDeadline).toBeGreaterThan(t1 + zk.sessionTimeoutMs);
    expect(zk.state).toBe('connected');
  });
});

describe('watches', () => {
  it('a data watch fires exactly once', async () => {
    const zk = await connect();
    await zk.create(`${base}/w`, 'a');
    const spy = watcherSpy<WatchEvent>();
    await zk.getData(`${base}/w`, { watch: spy.fn });
    await zk.setData(`${base}/w`, 'b');
    await zk.setData(`${base}/w`, 'c');
    await zk.delete(`${base}/w`);
    // Notifications precede the reply of the change on the same connection; one more round trip for good measure.
    await zk.sync(base);
    expect(spy.events).toEqual([{ type: 'dataChanged', path: `${base}/w` }]);
  });

  it('exists on a missing node fires "created" once', async () => {
    const zk = await connect();
    const other = await connect();
    const spy = watcherSpy<WatchEvent>();
    expect(await zk.exists(`${base}/later`, { watch: spy.fn })).toBeNull();
    await other.create(`${base}/later`);
    expect(await spy.next).toEqual({ type: 'created', path: `${base}/later` });
    await other.setData(`${base}/later`, 'x');
    await other.delete(`${base}/later`);
    await other.sync(base);
    await zk.sync(base);
    await zk.exists(base);
    expect(spy.events).toHaveLength(1);
  });

  it('a children watch fires once, on a child change', async () => {
    const zk = await connect();
    const spy = watcherSpy<WatchEvent>();
    expect(await zk.getChildren(base, { watch: spy.fn })).toEqual([]);
    await zk.setData(base, 'not a child change');
    await zk.create(`${base}/c1`);
    await zk.create(`${base}/c2`);
    await zk.sync(base);
    expect(spy.events).toEqual([{ type: 'childrenChanged', path: base }]);
  });

  it('a deleted node fires data and children watches once each watcher', async () => {
    const zk = await connect();
    await zk.create(`${base}/d`);
    const data = watcherSpy<WatchEvent>();
    const children = watcherSpy<WatchEvent>();
    await zk.getData(`${base}/d`, { watch: data.fn });
    await zk.getChildren(`${base}/d`, { watch: children.fn });
    await zk.delete(`${base}/d`);
    await zk.sync(base);
    expect(data.events).toEqual([{ type: 'deleted', path: `${base}/d` }]);
    expect(children.events).toEqual([{ type: 'deleted', path: `${base}/d` }]);
  });

  it('the same function set by two calls fires once', async () => {
    const zk = await connect();
    await zk.create(`${base}/twice`);
    const spy = watcherSpy<WatchEvent>();
    await zk.getData(`${base}/twice`, { watch: spy.fn });
    await zk.exists(`${base}/twice`, { watch: spy.fn });
    await zk.getData(`${base}/twice`, { watch: spy.fn });
    await zk.setData(`${base}/twice`, 'x');
    await zk.sync(base);
    expect(spy.events).toEqual([{ type: 'dataChanged', path: `${base}/twice` }]);
  });

  it('two watchers on one path of one kind fire once each, a third on another kind too', async () => {
    const zk = await connect();
    await zk.create(`${base}/two`);
    const first = watcherSpy<WatchEvent>();
    const second = watcherSpy<WatchEvent>();
    const exist = watcherSpy<WatchEvent>();
    await zk.getData(`${base}/two`, { watch: first.fn });
    await zk.getData(`${base}/two`, { watch: second.fn });
    await zk.getData(`${base}/two`, { watch: first.fn });
    await zk.exists(`${base}/two`, { watch: exist.fn });
    await zk.setData(`${base}/two`, 'x');
    await zk.sync(base);
    const event = { type: 'dataChanged', path: `${base}/two` };
    expect([first.events, second.events, exist.events]).toEqual([[event], [event], [event]]);
    // Fired watches are gone: a second change reaches nobody.
    await zk.setData(`${base}/two`, 'y');
    await zk.sync(base);
    expect([first.events.length, second.events.length, exist.events.length]).toEqual([1, 1, 1]);
  });

  it('a watcher that throws does not break the client', async () => {
    const zk = await connect();
    await zk.create(`${base}/t`);
    const errors: unknown[] = [];
    const onError = (e: unknown): void => void errors.push(e);
    process.on('uncaughtException', onError);
    try {
      const spy = watcherSpy<WatchEvent>();
      await zk.getData(`${base}/t`, {
        watch: () => {
          throw new Error('application bug');
        },
      });
      await zk.getData(`${base}/t`, { watch: spy.fn });
      await zk.setData(`${base}/t`, 'x');
      expect(await spy.next).toEqual({ type: 'dataChanged', path: `${base}/t` });
      await until(() => errors.length > 0, 'the watcher error to surface');
      expect(await zk.exists(`${base}/t`)).not.toBeNull();
    } finally {
      process.off('uncaughtException', onError);
    }
  });
});

describe('pipelining', () => {
  it('requests issued in one tick leave in one socket write', async () => {
    // Count what this client's own socket writes (its connector wraps it; no timing involved).
    const wire = new RequestCounter();
    const zk = await pool.connect({ connectString: file.server, sessionTimeoutMs: 30_000, connector: wire.connector });
    await zk.create(`${base}/p`);
    const [writesBefore, sentBefore] = [wire.writes, wire.sent];
    const burst: Promise<unknown>[] = [zk.create(`${base}/p/a`), zk.getChildren(`${base}/p`)];
    for (let i = 0; i < 100; i++) burst.push(zk.exists(`${base}/p`));
    const results = await Promise.all(burst);
    // 102 request frames in one write, and the getChildren sent after the create saw it (in-order processing).
    expect(wire.writes - writesBefore).toBe(1);
    expect(wire.sent - sentBefore).toBe(102);
    expect(results[1]).toEqual(['a']);
  });

  it('thousands of pipelined requests are answered in order', async () => {
    const zk = await connect();
    await zk.create(`${base}/q`);
    const n = 5000;
    const all = await Promise.all(Array.from({ length: n }, (_, i) => (i % 2 === 0 ? zk.exists(`${base}/q`) : zk.exists(`${base}/none${i}`))));
    all.forEach((stat, i) => expect(stat === null).toBe(i % 2 === 1));
  });
});

describe('digest auth and ACLs', () => {
  it('CREATOR_ALL_ACL by user A refuses user B and an unauthenticated client', async () => {
    const a = await connect({ auth: [{ scheme: 'digest', credentials: 'alice:secret-a' }] });
    const b = await connect({ auth: [{ scheme: 'digest', credentials: 'bob:secret-b' }] });
    const anon = await connect();
    // ZooKeeper checks a delete against the parent's ACL, so the parent is A's too.
    await a.create(`${base}/dir`, null, { acl: CREATOR_ALL_ACL });
    await a.create(`${base}/dir/mine`, 'x', { acl: CREATOR_ALL_ACL });
    const acl = (await a.getACL(`${base}/dir/mine`)).acl;
    expect(acl).toEqual([{ perms: Perms.ALL, id: { scheme: 'digest', id: digestAclId('alice', 'secret-a') } }]);
    for (const other of [b, anon]) {
      expect(zkCode(await other.delete(`${base}/dir/mine`).catch((e: unknown) => e))).toBe('ZK_NOAUTH');
      expect(zkCode(await other.setData(`${base}/dir/mine`, 'y').catch((e: unknown) => e))).toBe('ZK_NOAUTH');
      expect(zkCode(await other.getData(`${base}/dir/mine`).catch((e: unknown) => e))).toBe('ZK_NOAUTH');
      expect(zkCode(await other.setData(`${base}/dir`, 'y').catch((e: unknown) => e))).toBe('ZK_NOAUTH');
    }
    expect(await b.exists(`${base}/dir/mine`)).not.toBeNull(); // exists needs no permission
    await a.setData(`${base}/dir/mine`, 'z');
    await a.delete(`${base}/dir/mine`);
    await a.delete(`${base}/dir`);
  });

  it('CREATOR_ALL_ACL without auth is INVALIDACL', async () => {
    const anon = await connect();
    expect(zkCode(await anon.create(`${base}/x`, null, { acl: CREATOR_ALL_ACL }).catch((e: unknown) => e))).toBe('ZK_INVALIDACL');
  });

  it('a digestAclId ACL admits exactly that user', async () => {
    const anon = await connect();
    await anon.create(`${base}/for-bob`, 'x', {
      acl: [
        { perms: Perms.ALL, id: { scheme: 'digest', id: digestAclId('bob', 'secret-b') } },
        { perms: Perms.READ, id: { scheme: 'world', id: 'anyone' } },
      ],
    });
    const bob = await connect({ auth: [{ scheme: 'digest', credentials: 'bob:secret-b' }] });
    const wrong = await connect({ auth: [{ scheme: 'digest', credentials: 'bob:wrong' }] });
    expect(zkCode(await wrong.setData(`${base}/for-bob`, 'y').catch((e: unknown) => e))).toBe('ZK_NOAUTH');
    expect(zkCode(await anon.setData(`${base}/for-bob`, 'y').catch((e: unknown) => e))).toBe('ZK_NOAUTH');
    expect(Buffer.from((await anon.getData(`${base}/for-bob`)).data).toString()).toBe('x');
    await bob.setData(`${base}/for-bob`, 'by bob');
    await bob.delete(`${base}/for-bob`);
  });

  it.each([['no colon'], [''], [42]])('bad credentials %j: InvalidArgumentError', async (credentials) => {
    await expect(
      ZooKeeperClient.connect({ connectString: file.server, auth: [{ scheme: 'digest', credentials: credentials as string }] }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(
      ZooKeeperClient.connect({ connectString: file.server, auth: [{ scheme: 'sasl' as 'digest', credentials: 'a:b' }] }),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('bad input', () => {
  const badPaths = ['relative', 'a/b', '/trailing/', '/empty//segment', '/nul\u0000byte', '', '/dot/.', '/dotdot/..'];

  it.each(badPaths)('path %j: InvalidArgumentError from every operation, and the client stays usable', async (bad) => {
    const zk = await connect();
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    const calls: Promise<unknown>[] = [
      zk.create(bad),
      zk.delete(bad),
      zk.exists(bad),
      zk.getData(bad),
      zk.setData(bad, 'x'),
      zk.getChildren(bad),
      zk.getChildrenWithStat(bad),
      zk.getACL(bad),
      zk.setACL(bad, OPEN_ACL_UNSAFE),
      zk.sync(bad),
      zk.getEphemerals(bad),
      zk.multi([{ op: 'create', path: bad }]),
    ];
    for (const call of calls) await expect(call).rejects.toBeInstanceOf(InvalidArgumentError);
    const session = zk.sessionId;
    expect(await zk.exists(base)).not.toBeNull();
    expect(zk.sessionId).toBe(session);
    expect(states).toEqual([]);
  });

  it('data over the packet limit: InvalidArgumentError, no connection drop; the largest accepted size works', async () => {
    const zk = await connect();
    const states: string[] = [];
    zk.on('state', (s) => states.push(s));
    const path = `${base}/big`;
    await zk.create(path);
    const tooBig = new Uint8Array(1024 * 1024 + 1);
    await expect(zk.create(`${base}/big2`, tooBig)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.setData(path, tooBig)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.multi([{ op: 'setData', path, data: tooBig }])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(
      zk.multi([
        { op: 'setData', path, data: new Uint8Array(600_000) },
        { op: 'create', path: `${base}/big3`, data: new Uint8Array(600_000) },
      ]),
    ).rejects.toBeInstanceOf(InvalidArgumentError);
    // Just under the client's limit: the server must accept it too (no silent disconnect).
    const largest = new Uint8Array(MAX_PACKET_BYTES - 64 - Buffer.byteLength(path)).fill(7);
    const stat = await zk.setData(path, largest);
    expect(stat.dataLength).toBe(largest.length);
    const read = await zk.getData(path);
    expect(read.data.length).toBe(largest.length);
    await expect(zk.setData(path, new Uint8Array(largest.length + 1))).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(states).toEqual([]);
    expect(await zk.exists(base)).not.toBeNull();
  });

  it('bad versions, ACLs and multi ops: InvalidArgumentError', async () => {
    const zk = await connect();
    await expect(zk.delete(base, -2)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.setData(base, 'x', 1.5)).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.create(`${base}/x`, null, { acl: [] })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.multi([])).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(zk.multi([{ op: 'bogus' } as never])).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await zk.exists(base)).not.toBeNull();
  });

  it('create and setData with data that is not bytes reject instead of throwing synchronously', async () => {
    const zk = await connect();
    const created = (() => {
      try {
        return zk.create(`${base}/x`, 42 as never);
      } catch (error) {
        return error;
      }
    })();
    expect(created).toBeInstanceOf(Promise);
    await expect(created).rejects.toBeInstanceOf(InvalidArgumentError);
    const set = (() => {
      try {
        return zk.setData(base, { not: 'bytes' } as never);
      } catch (error) {
        return error;
      }
    })();
    expect(set).toBeInstanceOf(Promise);
    await expect(set).rejects.toBeInstanceOf(InvalidArgumentError);
    expect(await zk.exists(base)).not.toBeNull();
  });
});
