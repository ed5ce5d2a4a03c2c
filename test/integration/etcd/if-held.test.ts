// Fenced writes to etcd itself: lock.ifHeld(ops) / leadership.ifLeader(ops)
// run the ops in one txn comparing our key's create revision. A held lock
// commits; one whose key another client deleted is refused by etcd while the
// holder still believes it holds (everything etcd sends it held back in a
// proxy: no window between compare and write); one whose lease was revoked
// is refused before any request; nothing is written by any refusal.
import { describe, expect, it, vi } from 'vitest';
import { acquireLock, campaign } from '../../../src/sources/etcd/index.js';
import { LockLostError } from '../../../src/errors.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueId, uniqueLockName } from '../../helpers/unique.js';
import { within } from '../../helpers/wait.js';
import { EtcdPool, singleHosts } from './helpers.js';

const pool = new EtcdPool();

const put = (key: string, value: string) => ({ request_put: { key: Buffer.from(key), value: Buffer.from(value) } });

function ended(signal: AbortSignal): Promise<void> {
  return signal.aborted ? Promise.resolve() : new Promise((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
}

describe('etcd lock.ifHeld', () => {
  it('a held lock commits the ops and answers their responses', async () => {
    const etcd = pool.client();
    const lock = await acquireLock(etcd, uniqueLockName('etcd_ifheld'));
    const key = `fencekeeper-test/${uniqueId('ifheld')}`;
    const responses = await lock.ifHeld([put(key, 'v1')]);
    expect(responses).toHaveLength(1);
    expect(await etcd.get(key).string()).toBe('v1');
    await lock.release();
    await etcd.delete().key(key);
  });

  it('its key deleted by another client, the holder not told yet: etcd refuses the txn, nothing is written', async () => {
    const proxy = await TcpProxy.to(singleHosts()[0]!);
    try {
      const admin = pool.client();
      const etcd = pool.client([proxy.address]);
      const lock = await acquireLock(etcd, uniqueLockName('etcd_ifheld_deleted'));
      const key = `fencekeeper-test/${uniqueId('ifheld_deleted')}`;
      proxy.holdReplies();
      await admin.delete().key(lock.key);
      expect(lock.held).toBe(true); // nothing reached the holder: by its clock and knowledge it holds
      const txn = vi.spyOn(etcd.kv, 'txn');
      const write = lock.ifHeld([put(key, 'late')]).catch((error: unknown) => error);
      expect(txn).toHaveBeenCalledTimes(1);
      await proxy.whenHeld();
      proxy.deliverHeld();
      const refused = await within(write, 10_000, 'the txn answered');
      expect(refused).toBeInstanceOf(LockLostError);
      expect((refused as LockLostError).reason).toBe('node_deleted');
      expect(await admin.get(key).string()).toBeNull();
      expect(lock.held).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it('its lease revoked: refused before any request with LOCK_LOST, nothing written', async () => {
    const etcd = pool.client();
    const lock = await acquireLock(etcd, uniqueLockName('etcd_ifheld_revoked'));
    await etcd.leaseClient.leaseRevoke({ ID: lock.lease.toString() });
    await within(ended(lock.signal), 10_000, 'the holding to end');
    const key = `fencekeeper-test/${uniqueId('ifheld_revoked')}`;
    const txn = vi.spyOn(etcd.kv, 'txn');
    const refused = await lock.ifHeld([put(key, 'late')]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(LockLostError);
    expect((refused as LockLostError).code).toBe('LOCK_LOST');
    expect(txn).not.toHaveBeenCalled();
    expect(await etcd.get(key).string()).toBeNull();
  });

  it('bad input: INVALID_ARGUMENT, nothing sent (no ops, a write of our own key)', async () => {
    const etcd = pool.client();
    const lock = await acquireLock(etcd, uniqueLockName('etcd_ifheld_input'));
    const txn = vi.spyOn(etcd.kv, 'txn');
    await expect(lock.ifHeld([])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    await expect(lock.ifHeld([{ request_delete_range: { key: Buffer.from(lock.key) } }])).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(txn).not.toHaveBeenCalled();
    expect(lock.held).toBe(true);
    await lock.release();
  });
});

describe('etcd leadership.ifLeader', () => {
  it('the leader commits; once its key is deleted it is refused (by etcd or its own watch), nothing written', async () => {
    const etcd = pool.client();
    const leader = await campaign(etcd, uniqueLockName('etcd_ifleader'));
    const key = `fencekeeper-test/${uniqueId('ifleader')}`;
    await leader.ifLeader([put(key, 'epoch')]);
    expect(await etcd.get(key).string()).toBe('epoch');
    await pool.client().delete().key(leader.key);
    const refused = await leader.ifLeader([put(key, 'late')]).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(LockLostError);
    expect(await etcd.get(key).string()).toBe('epoch');
    await etcd.delete().key(key);
  });
});
