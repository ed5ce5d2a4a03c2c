/**
 * Our key at the head of a queue: the core's queue grant (../../queue-grant.ts)
 * over etcd.
 *
 * It holds until the lease's step-down deadline (the lease's clock: last
 * acknowledged keepalive's send time + granted TTL - margin), until the
 * lease ends, until someone else deletes our key (a watch on it), or until
 * we leave (release / resign), which aborts the signal at once and then
 * deletes the key.
 */
import type { SequencerKind, SourceIdentity } from '../../index.js';
import { QueueGrant, type Holding } from '../../extend.js';
import { int64, type EtcdClient, type EtcdRequestOp, type EtcdTxnResponse } from './client.js';
import { fencedTxn, type FencedKey } from './fenced-txn.js';
import { leave, type QueueKey } from './queue.js';
import type { Lease } from './session.js';
import { etcdSourceIds } from './source-id.js';
import { repeated } from './retry.js';
import { watchRange } from './watches.js';

export abstract class HeldKey extends QueueGrant<EtcdRequestOp, EtcdTxnResponse['responses']> {
  /** Our key. */
  readonly key: string;
  /** The lease our key hangs on (the process's session). */
  readonly lease: bigint;
  readonly #etcd: EtcdClient;
  readonly #node: QueueKey;
  readonly #lease: Lease;
  readonly #holding: Holding;

  /**
   * `kind`: a lock's grant (plain, read, write, a permit's) or a leadership.
   * `revision`: one at which our key was seen at the head. `sequencerName`:
   * a permit's slot (`<name>#<slot>`).
   */
  constructor(etcd: EtcdClient, lease: Lease, kind: SequencerKind, name: string, node: QueueKey, revision: bigint, marginMs: number, sequencerName: string = name) {
    super(kind, name, node.token, sequencerName);
    this.#etcd = etcd;
    this.#node = node;
    this.#lease = lease;
    this.key = node.key;
    this.lease = lease.id;
    const holding = lease.clock.hold({ lock: this.lockLabel, marginMs, token: node.token, deadline: () => lease.deadline });
    this.#holding = holding;
    // The watch on our own key costs a watch create and a cancel: a holder
    // that releases within this turn of the event loop never needs it, so it
    // starts on the next one. It watches from the revision our key was seen
    // at, so a deletion meanwhile is still reported.
    setImmediate(() => {
      if (!holding.ended) watchOwnKey(etcd, lease, node, revision + 1n, holding);
    });
  }

  protected override entryJSON(): Record<string, string> {
    return { key: this.key };
  }

  protected holding(): Holding {
    return this.#holding;
  }

  protected sourceIdentity(): SourceIdentity | undefined {
    return etcdSourceIds.known(this.#etcd);
  }

  get deadline(): number {
    return this.#holding.deadline;
  }

  /** ifHeld / ifLeader: `ops` in one txn behind a compare of our key's create revision (./fenced-txn.ts). */
  protected fenced(what: 'ifHeld' | 'ifLeader', ops: readonly EtcdRequestOp[]): Promise<EtcdTxnResponse['responses']> {
    const holding = this.#holding;
    const key: FencedKey = {
      key: this.key,
      token: this.#node.token,
      get held() {
        return holding.held;
      },
      signal: holding.signal,
      lost: () => holding.lose('node_deleted', 'its key was deleted'),
    };
    return fencedTxn(this.#etcd, key, this.lockLabel, what, ops);
  }

  protected leaveEntry(): Promise<void> {
    return leave(this.#etcd, this.#lease, this.#node);
  }
}

/**
 * Lose the grant when our key is deleted at or after revision `from` (an
 * operator's delete; the lease's end is the clock's). A watch etcd can no
 * longer serve from there (its history compacted past it) cannot tell
 * whether our key went meanwhile: read it, and watch on from that read.
 */
function watchOwnKey(etcd: EtcdClient, lease: Lease, node: QueueKey, from: bigint, holding: Holding): void {
  const watch = watchRange(etcd, node.keyBytes, undefined, from, false, {
    deleted: () => holding.lose('node_deleted', 'its key was deleted'),
    lost: (error) => {
      if (error.code === 'ETCD_WATCH_CLOSED' || holding.ended) return;
      repeated(() => etcd.kv.range({ key: node.keyBytes }), lease).then(
        (response) => {
          if (holding.ended) return;
          const kv = response.kvs[0];
          if (kv === undefined || int64(kv.create_revision, 'create revision') !== node.token) holding.lose('node_deleted', 'its key was deleted');
          else watchOwnKey(etcd, lease, node, int64(response.header.revision, 'revision') + 1n, holding);
        },
        // The lease ended or the client was closed: the grant's deadline still holds.
        () => undefined,
      );
    },
  });
  holding.signal.addEventListener('abort', () => watch.cancel(), { once: true });
}
