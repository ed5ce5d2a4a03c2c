/**
 * Our key at the head of a queue: what a held lock and a leadership share.
 *
 * It holds until the lease's step-down deadline (the lease's clock: last
 * acknowledged keepalive's send time + granted TTL - margin), until the
 * lease ends, until someone else deletes our key (a watch on it), or until
 * we leave (release / resign), which aborts the signal at once and then
 * deletes the key.
 */
import { type Sequencer, type SequencerKind } from '../../index.js';
import { grantSequencer, type Holding } from '../../extend.js';
import type { EtcdClient, EtcdRequestOp, EtcdTxnResponse } from './client.js';
import { fencedTxn, type FencedKey } from './fenced-txn.js';
import { leave, type QueueKey } from './queue.js';
import type { Lease } from './session.js';
import { etcdSourceIds } from './source-id.js';

export abstract class HeldKey {
  readonly name: string;
  /** Our key. */
  readonly key: string;
  /** The lease our key hangs on (the process's session). */
  readonly lease: bigint;
  readonly #etcd: EtcdClient;
  readonly #node: QueueKey;
  readonly #lease: Lease;
  readonly #kind: SequencerKind;
  /** The name LockLostError carries ('jobs/reindex', 'election primary'). */
  readonly #lock: string;
  readonly #holding: Holding;
  #leaving: Promise<void> | null = null;
  #sequencer: Sequencer | null = null;

  /** `kind`: a lock's grant or a leadership. `revision`: one at which our key was seen at the head. */
  constructor(etcd: EtcdClient, lease: Lease, kind: SequencerKind, name: string, node: QueueKey, revision: bigint, marginMs: number) {
    const lock = kind === 'lock' ? name : `election ${name}`;
    this.#kind = kind;
    this.#lock = lock;
    this.#etcd = etcd;
    this.#node = node;
    this.#lease = lease;
    this.name = name;
    this.key = node.key;
    this.lease = lease.id;
    const holding = lease.clock.hold({ lock, marginMs, token: node.token, deadline: () => lease.deadline });
    this.#holding = holding;
    // The watch on our own key costs a watch create and a cancel: a holder
    // that releases within this turn of the event loop never needs it, so it
    // starts on the next one. It watches from the revision our key was seen
    // at, so a deletion meanwhile is still reported.
    setImmediate(() => {
      if (!holding.ended) watchOwnKey(etcd, node.key, revision, holding);
    });
  }

  /** The grant's sequencer (our kind, name and token, the cluster's identity), made when first asked for. */
  get sequencer(): Sequencer {
    return (this.#sequencer ??= grantSequencer(this.#kind, this.name, etcdSourceIds.known(this.#etcd), this.#node.token));
  }

  get signal(): AbortSignal {
    return this.#holding.signal;
  }

  get held(): boolean {
    return this.#holding.held;
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
    return fencedTxn(this.#etcd, key, this.#lock, what, ops);
  }

  /** Abort the signal, then delete our key. Idempotent: every call returns the first one's promise. */
  protected leave(): Promise<void> {
    if (this.#leaving === null) {
      this.#holding.lose('released');
      this.#leaving = leave(this.#etcd, this.#lease, this.#node);
    }
    return this.#leaving;
  }
}

function watchOwnKey(etcd: EtcdClient, key: string, revision: bigint, holding: Holding): void {
  const watcher = etcd.watch().key(key).startRevision((revision + 1n).toString()).watcher();
  watcher.on('delete', () => holding.lose('node_deleted', 'its key was deleted'));
  // A watch etcd refuses (a compacted revision) cannot tell us of a deletion: the deadline still holds.
  watcher.on('error', () => undefined);
  holding.signal.addEventListener('abort', () => void watcher.cancel().catch(() => undefined), { once: true });
}
