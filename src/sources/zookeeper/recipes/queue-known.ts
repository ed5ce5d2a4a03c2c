/**
 * What this process knows about one deep lock queue, shared by its waiters
 * in it (over every session to the same servers), so that a waiter told its
 * predecessor was deleted can usually tell a release from a give-up without
 * listing the queue.
 *
 * A waiter's predecessor going means either a release (the predecessor was
 * the head: nothing is ahead of us now) or a give-up (some node ahead may
 * still be there). The nodes that can be ahead of ours are those of our
 * join's listing with a smaller sequence: a node made later gets a larger
 * one (the sequence is the parent's cversion, and the parent, a container,
 * lives as long as our node does). Those nodes only ever leave. So if every
 * node of our listing ahead of ours is known to be gone, we head the queue:
 * the grant needs no listing. Whenever any of them is not known gone, the
 * waiter lists, as before.
 *
 * Each waiter keeping its own listing would be O(n) per waiter (1,000
 * waiters on one lock in one process: a million names); instead the
 * process keeps one table per queue: every name its listings showed, in
 * sequence order, each marked gone only on a fact, never on a guess:
 *   - a deletion event for it (any of our sessions: names are unique to one
 *     join, so a deletion seen anywhere is that node's);
 *   - a listing by one of our waiters, on its own session, that lacks it
 *     while its sequence is below that waiter's: it was made before the
 *     waiter's node, so that session had seen it, and it is gone;
 *   - one of our waiters got its turn: every node below it is gone.
 * An absence seen on another session proves nothing (its server may not
 * have seen the node's create yet), so a read on one session never prunes
 * for a name it did not see there first. A name dropped from the table and
 * listed again comes back as present: that only sends a waiter to list.
 *
 * Names are looked up by sequence (a listing's are read off its bytes, no
 * string made for a name already known): ZooKeeper gives each sequential
 * child of one parent incarnation its own. A foreign child named like ours
 * could share one; a table that meets two names for one sequence trusts
 * itself no more (every waiter lists, as before).
 *
 * A table is for one queue node incarnation: keyed by the servers dialled
 * (and the connector, if the client has its own), the chroot, the parent path and the parent's czxid (a container reaped
 * and made again restarts its sequences). It exists while one of our
 * waiters in a queue of more than two waits (the common single waiter needs
 * none: its predecessor is the head), and is dropped with the last.
 */
import { clientInternals, type ZooKeeperClient } from '../client.js';
import { ChildListing } from '../child-listing.js';
import { compareSequence, sequenceInBytes, sequenceOf } from './queue-order.js';

/** One name of the queue as listed: its sequence and whether it may still exist. */
interface Known {
  readonly name: string;
  readonly seq: number;
  /** False once a fact says the node is gone. */
  present: boolean;
  /** The last merge that listed it (a listing's absences, see merge). */
  listed: number;
}

/** The tables of the process's deep queues, by key (see KnownQueue.keyOf). */
const tables = new Map<string, KnownQueue>();

/** Connectors (a custom stream per address) by identity: clients dialling the same labels through different connectors may reach different servers. */
const connectorIds = new WeakMap<object, number>();
let nextConnectorId = 0;

/** The process's knowledge of one deep queue (see the module comment). */
export class KnownQueue {
  readonly #key: string;
  /** Every name known, in sequence order; [#head] is the first that may still exist (those before it are gone). */
  #order: Known[] = [];
  #head = 0;
  readonly #bySeq = new Map<number, Known>();
  /** Two names met for one sequence (a foreign child named like ours): the table no longer answers. */
  #confused = false;
  /**
   * The highest sequence one of our waiters was granted at (null: none yet):
   * nothing below it exists any more. A listing that was on its way when
   * a node below it went (read on one session, the deletion heard on
   * another) still names that node: the floor keeps it from coming back as
   * present once forgotten, which would send the next waiters to list.
   */
  #floor: number | null = null;
  /** Waiters using the table: it is dropped when the last one ends. */
  #users = 0;
  #merges = 0;

  private constructor(key: string) {
    this.#key = key;
  }

  /**
   * The table of `parent` (of incarnation `czxid`) on `zk`'s servers, made if
   * there is none, counted as used by one more waiter (release it with
   * `unuse`).
   */
  static use(zk: ZooKeeperClient, parent: string, czxid: bigint): KnownQueue {
    const key = KnownQueue.keyOf(zk, parent, czxid);
    let table = tables.get(key);
    if (table === undefined) {
      table = new KnownQueue(key);
      tables.set(key, table);
    }
    table.#users++;
    return table;
  }

  /**
   * The table of `parent` (incarnation `czxid`) if deeper waiters of ours
   * made one, else null; not counted as used (for a fact seen by a waiter
   * that keeps none: right behind the head, it needs none, but what it sees
   * helps the deeper ones).
   */
  static find(zk: ZooKeeperClient, parent: string, czxid: bigint): KnownQueue | null {
    return tables.size === 0 ? null : (tables.get(KnownQueue.keyOf(zk, parent, czxid)) ?? null);
  }

  /** How many tables the process keeps (for tests: they are dropped with their last waiter). */
  static get count(): number {
    return tables.size;
  }

  private static keyOf(zk: ZooKeeperClient, parent: string, czxid: bigint): string {
    const internals = clientInternals.get(zk);
    // Sorted: clients given the same servers in another order (to spread over them) share the table.
    const servers = internals === undefined ? '?' : internals.servers.map((s) => `${s.host}:${s.port}`).sort().join(',');
    let via = '';
    const connector = internals?.connector as object | undefined;
    if (connector !== undefined) {
      let id = connectorIds.get(connector);
      if (id === undefined) connectorIds.set(connector, (id = nextConnectorId++));
      via = `#${id}`;
    }
    return `${servers}${via}\n${zk.chroot}\n${parent}\n${czxid}`;
  }

  /** One waiter is done with the table; the last one drops it. */
  unuse(): void {
    if (--this.#users === 0 && tables.get(this.#key) === this) tables.delete(this.#key);
  }

  /**
   * Take in a listing of the queue made on the session of our waiter whose
   * node has sequence `own` (and is in the listing): every name not known is
   * added, and every known name below `own` that the listing lacks is gone.
   * Foreign children (no sequence) are left out.
   */
  merge(listing: readonly string[] | ChildListing, own: number): void {
    const mark = ++this.#merges;
    if (listing instanceof ChildListing) {
      const bytes = listing.bytes;
      listing.forEach((start, end, at) => {
        const seq = sequenceInBytes(bytes, start, end);
        if (seq === null || this.#belowFloor(seq)) return;
        const known = this.#bySeq.get(seq);
        if (known === undefined) this.#insert({ name: listing.nameAt(at), seq, present: true, listed: mark });
        else if (listing.equals(start, end, known.name)) known.listed = mark;
        else this.#confused = true;
      });
    } else {
      for (const name of listing) {
        const seq = sequenceOf(name);
        if (seq === null || this.#belowFloor(seq)) continue;
        const known = this.#bySeq.get(seq);
        if (known === undefined) this.#insert({ name, seq, present: true, listed: mark });
        else if (known.name === name) known.listed = mark;
        else this.#confused = true;
      }
    }
    const order = this.#order;
    for (let i = this.#head; i < order.length; i++) {
      const known = order[i]!;
      if (compareSequence(known.seq, own) >= 0) break;
      if (known.listed !== mark) known.present = false;
    }
    this.#advance();
  }

  /** A fact: the node `name` is gone (its deletion event, or a read on a session that had listed it). */
  gone(name: string): void {
    const seq = sequenceOf(name);
    const known = seq === null ? undefined : this.#bySeq.get(seq);
    if (known === undefined || known.name !== name) return;
    known.present = false;
    this.#advance();
  }

  /** A fact: our node of sequence `own` heads the queue, so every node below it is gone, for good (later nodes get larger sequences). */
  headed(own: number): void {
    if (this.#floor === null || compareSequence(own, this.#floor) > 0) this.#floor = own;
    const order = this.#order;
    for (let i = this.#head; i < order.length; i++) {
      const known = order[i]!;
      if (compareSequence(known.seq, own) >= 0) break;
      known.present = false;
    }
    this.#advance();
  }

  /** True when every node the table holds below sequence `own` is known gone: a node of ours with that sequence heads the queue. */
  nothingBelow(own: number): boolean {
    if (this.#confused) return false;
    const first = this.#order[this.#head];
    return first === undefined || compareSequence(first.seq, own) >= 0;
  }

  #belowFloor(seq: number): boolean {
    return this.#floor !== null && compareSequence(seq, this.#floor) < 0;
  }

  #insert(known: Known): void {
    const order = this.#order;
    this.#bySeq.set(known.seq, known);
    // Names mostly arrive in sequence order (joins land at the tail): append; else find its place.
    const last = order[order.length - 1];
    if (last === undefined || compareSequence(known.seq, last.seq) > 0) {
      order.push(known);
      return;
    }
    let lo = this.#head;
    let hi = order.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (compareSequence(order[mid]!.seq, known.seq) < 0) lo = mid + 1;
      else hi = mid;
    }
    order.splice(lo, 0, known);
  }

  /** Move the head past the names known gone, forgetting them (a name listed again later comes back as present: only a reason to list). */
  #advance(): void {
    const order = this.#order;
    let head = this.#head;
    while (head < order.length && !order[head]!.present) {
      this.#bySeq.delete(order[head]!.seq);
      head++;
    }
    // Drop the gone prefix once it is most of the array, so a long-lived queue's table stays the size of the queue.
    if (head > 64 && head * 2 > order.length) {
      this.#order = order.slice(head);
      head = 0;
    }
    this.#head = head;
  }
}
