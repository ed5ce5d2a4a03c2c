// The identity of an etcd cluster, for sequencers: the cluster id that etcd
// puts in the header of every response (etcdserverpb.ResponseHeader
// cluster_id). It is chosen when the cluster is first bootstrapped and kept
// in every member's data directory, so every client of the cluster reads the
// same one, across member restarts and leader changes; a cluster made anew
// (a fresh bootstrap, not a restore) has another. Kept as its decimal
// spelling (a uint64, never a lossy number).
//
// Taken from the reply to the client's first join (its transaction's header),
// so no grant costs a request for it; only if that header had none is it
// asked for, with a one-key range read. Every later grant reads it from memory.
import { ProtocolError } from '../../index.js';
import { SourceIdentityCache } from '../../extend.js';
import type { EtcdClient, EtcdResponseHeader } from './client.js';

const CLUSTER_ID = /^[1-9][0-9]{0,19}$/;
// Any key will do: only the header is read.
const SOME_KEY = Buffer.from('fencekeeper/source-id');

export const etcdSourceIds = new SourceIdentityCache<EtcdClient>(async (etcd) => {
  const { header } = await etcd.kv.range({ key: SOME_KEY, limit: 1, keys_only: true });
  const id = header.cluster_id;
  if (typeof id !== 'string' || !CLUSTER_ID.test(id)) throw new ProtocolError(`etcd sent a malformed cluster id: ${String(id)}`);
  return { kind: 'etcd', id };
});

/** Keep the cluster id of a reply the join got anyway (once per client: a lookup after that). */
export function noteClusterId(etcd: EtcdClient, header: EtcdResponseHeader): void {
  if (etcdSourceIds.known(etcd) !== undefined) return;
  const id = header.cluster_id;
  if (typeof id === 'string' && CLUSTER_ID.test(id)) etcdSourceIds.learn(etcd, { kind: 'etcd', id });
}
