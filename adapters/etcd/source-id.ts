// The identity of an etcd cluster, for sequencers: the cluster id that etcd
// puts in the header of every response (etcdserverpb.ResponseHeader
// cluster_id). It is chosen when the cluster is first bootstrapped and kept
// in every member's data directory, so every client of the cluster reads the
// same one, across member restarts and leader changes; a cluster made anew
// (a fresh bootstrap, not a restore) has another. Kept as its decimal
// spelling (a uint64, never a lossy number).
//
// Asked once per client, with a one-key range read after the client's first
// grant; every later grant reads it from memory.
import { ProtocolError, SourceIdentityCache } from '../../src/index.js';
import type { EtcdClient } from './client.js';
import { LOCKS_ROOT } from './queue.js';

export const etcdSourceIds = new SourceIdentityCache<EtcdClient>(async (etcd) => {
  const { header } = await etcd.kv.range({ key: Buffer.from(LOCKS_ROOT), limit: 1, keys_only: true });
  const id = header.cluster_id;
  if (typeof id !== 'string' || !/^[1-9][0-9]{0,19}$/.test(id)) throw new ProtocolError(`etcd sent a malformed cluster id: ${String(id)}`);
  return { kind: 'etcd', id };
});
