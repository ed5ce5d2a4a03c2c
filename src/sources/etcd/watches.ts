/**
 * The etcd source's watches, many on one gRPC Watch stream per etcd3 client,
 * driven here over etcd3's raw Watch service (client.watchClient).
 *
 * etcd3's own watch manager sends a watch's create request only once the
 * previous one's "created" reply has come back (it matches replies to
 * watchers by order, one at a time): 10,000 waits took some 14 s just to
 * start watching, and each watcher is an EventEmitter with its listeners. It
 * also cancels the whole stream when its last watcher goes, which etcd3
 * then takes for a failure of the member (it closes every connection to it).
 *
 * Here each watch names its own id (WatchCreateRequest.watch_id, etcd 3.4
 * and later), so creates go out back to back, as fast as the stream takes
 * them, and a reply is matched by its id. etcd answers the creates of one
 * stream in the order it received them (one receive loop, one control
 * channel: etcdserver/api/v3rpc/watch.go), which is how a refused create is
 * matched: its reply carries watch id -1, and it is the oldest create not
 * answered yet. A watch costs a small object: its key, the revision it has
 * reached, its id, its listener.
 *
 * A watch reports every change from the revision it was created at. When
 * the stream breaks (the member stopped, restarted, or dropped us), every
 * live watch is created again on a new stream, to whichever member etcd3
 * picks, from the revision after the last event it delivered: etcd replays
 * what happened meanwhile, so a deletion while the stream was down is still
 * reported. When etcd can no longer replay from there (the history was
 * compacted past it), the watch ends with a WatchLostError
 * (ETCD_WATCH_COMPACTED): its owner reads the state again instead. A
 * stream that goes silent (a member paused, or gone without closing its
 * connection) is found by a progress request it leaves unanswered, and
 * replaced the same way.
 *
 * Not covered: a member cut off from its cluster's leader still answers
 * progress requests but has no new events to report; etcd cancels such a
 * member's watches only for clients that send the "hasleader" metadata,
 * which etcd3 does not let a caller add to a stream.
 */
import { performance } from 'node:perf_hooks';
import { ProtocolError } from '../../index.js';
import { int64, type EtcdClient, type EtcdDuplexStream, type EtcdKeyValue, type EtcdWatchRequest, type EtcdWatchResponse } from './client.js';
import { isClosedClient } from './client-errors.js';

/**
 * Why a watch ended without its owner cancelling it:
 * - ETCD_WATCH_COMPACTED: etcd compacted its history past the revision the
 *   watch had to resume from; what happened in between cannot be replayed.
 * - ETCD_WATCH_CANCELED: etcd refused or cancelled the watch (its reason in the message).
 * - ETCD_WATCH_CLOSED: the etcd3 client was closed.
 */
export type WatchLostCode = 'ETCD_WATCH_COMPACTED' | 'ETCD_WATCH_CANCELED' | 'ETCD_WATCH_CLOSED';

/**
 * A watch of the etcd source that etcd can no longer serve: its owner must
 * read what it watched again (and watch anew from that read) rather than
 * wait for an event that may already have happened. Classify by `code`.
 */
export class WatchLostError extends Error {
  override readonly name = 'WatchLostError';
  /** Stable: ETCD_WATCH_COMPACTED, ETCD_WATCH_CANCELED or ETCD_WATCH_CLOSED. */
  readonly code: WatchLostCode;
  /** ETCD_WATCH_COMPACTED: the oldest revision etcd still keeps (null otherwise). */
  readonly compactRevision: bigint | null;

  constructor(code: WatchLostCode, message: string, compactRevision: bigint | null = null) {
    super(message);
    this.code = code;
    this.compactRevision = compactRevision;
  }
}

/** What a watch tells its owner. Every method is optional but `lost`. */
export interface WatchListener {
  /** A key in the watched range was deleted (at kv.mod_revision). */
  deleted?(kv: EtcdKeyValue): void;
  /** A key in the watched range was written. */
  put?(kv: EtcdKeyValue): void;
  /**
   * The watch is in place (once, at its first creation): from now on it
   * reports every change after `revision`. For a watch from the present,
   * the store's revision when etcd created it.
   */
  created?(revision: bigint): void;
  /** The stream broke: the watch is created again on a new one, from the revision it had reached. */
  disconnected?(error: Error): void;
  /** Created again after a break, from where it was: nothing in between is missed. */
  resumed?(): void;
  /** The watch ended without being cancelled (see WatchLostError); nothing more is called. */
  lost(error: WatchLostError): void;
}

/** A watch made by watchRange: cancel() when it is no longer needed (idempotent). */
export interface EtcdWatch {
  cancel(): void;
}

// A watch's state.
const SENDING = 0; // waiting to be written to a stream (none open, a break, or the stream full)
const CREATING = 1; // create written, its reply not in yet
const LIVE = 2; // created: events come
const ENDED = 3; // cancelled or lost: nothing more for it

/**
 * A stream that said nothing for this long while watches are on it is asked
 * for progress (etcd answers a WatchProgressRequest at once, from the member
 * itself); still nothing one more interval later, it is taken for stuck and
 * replaced. A member that is stopped without closing its connections (paused,
 * or its machine gone without a reset) would otherwise hold every watch on
 * it, and the waiters behind them, for as long as it stays so.
 */
const PROBE_MS = 5000;

/** The reconnect delay after a broken stream: doubled at each failure in a row, up to MAX. */
const FIRST_BACKOFF_MS = 50;
const MAX_BACKOFF_MS = 2000;

class Watch implements EtcdWatch {
  /** Its id on the current stream (0: not written to it). */
  id = 0;
  state = SENDING;
  /** Created at least once (a later creation is a resumption). */
  created = false;
  /**
   * The first revision not reported yet: a watch created again starts
   * here. Before the first creation of a watch from the present, the
   * caller's lower bound (a revision it read at).
   */
  next: bigint;
  /** The first creation asks for the present (no start revision). */
  fromNow: boolean;
  readonly key: Buffer;
  readonly end: Buffer | undefined;
  readonly listener: WatchListener;
  readonly #stream: WatchStream;

  constructor(stream: WatchStream, key: Buffer, end: Buffer | undefined, next: bigint, fromNow: boolean, listener: WatchListener) {
    this.#stream = stream;
    this.key = key;
    this.end = end;
    this.next = next;
    this.fromNow = fromNow;
    this.listener = listener;
  }

  cancel(): void {
    this.#stream.cancel(this);
  }
}

/** One client's Watch stream and the watches on it. */
class WatchStream {
  readonly #etcd: EtcdClient;
  #stream: EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse> | null = null;
  #opening = false;
  #reopen: NodeJS.Timeout | null = null;
  #backoffMs = FIRST_BACKOFF_MS;
  /** The stream took no more writes: the rest wait for its 'drain'. */
  #full = false;
  /** Watches written to the current stream, by id (creating or live). */
  readonly #byId = new Map<number, Watch>();
  /** Creates written and not answered yet, oldest first (from `#creatingHead` on). */
  #creating: Watch[] = [];
  #creatingHead = 0;
  /** Watches to write once a stream takes them, in order (from `#sendingHead` on). */
  #sending: Watch[] = [];
  #sendingHead = 0;
  /** Ids are never used twice on one stream (a cancelled id's late events are told apart). */
  #nextId = 1;
  /** Watches not ended. */
  #count = 0;
  /** Close the stream once no watch is left (the client's session was closed). */
  #closeWhenIdle = false;
  /** When the current stream last said anything (performance.now()). */
  #heardAt = 0;
  /** When a progress request went out unanswered (null: none). */
  #probedAt: number | null = null;
  #probe: NodeJS.Timeout | null = null;

  constructor(etcd: EtcdClient) {
    this.#etcd = etcd;
  }

  get count(): number {
    return this.#count;
  }

  add(watch: Watch): void {
    this.#count++;
    this.#closeWhenIdle = false;
    this.#sending.push(watch);
    if (this.#stream !== null) this.#flush();
    else this.#open();
  }

  cancel(watch: Watch): void {
    if (watch.state === ENDED) return;
    const was = watch.state;
    this.#ended(watch);
    // A create in flight is cancelled when its reply names its id; a watch not written yet is skipped.
    if (was === LIVE && this.#stream !== null) {
      this.#byId.delete(watch.id);
      this.#stream.write({ cancel_request: { watch_id: watch.id } });
    }
  }

  /** The client's session is closed: close the stream now if no watch is left, else when the last one ends. */
  closeWhenIdle(): void {
    this.#closeWhenIdle = true;
    if (this.#count === 0) this.#close();
  }

  #ended(watch: Watch): void {
    watch.state = ENDED;
    this.#count--;
    if (this.#count === 0 && this.#closeWhenIdle) this.#close();
  }

  #lose(watch: Watch, error: WatchLostError): void {
    if (watch.state === ENDED) return;
    this.#byId.delete(watch.id);
    this.#ended(watch);
    watch.listener.lost(error);
  }

  #open(): void {
    if (this.#opening || this.#stream !== null || this.#reopen !== null) return;
    this.#opening = true;
    let opened: Promise<EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>>;
    try {
      opened = this.#etcd.watchClient.watch();
    } catch (error) {
      opened = Promise.reject(error);
    }
    opened.then(
      (stream) => {
        this.#opening = false;
        if (this.#count === 0) {
          quietlyClose(stream);
          return;
        }
        this.#stream = stream;
        this.#full = false;
        this.#nextId = 1;
        this.#heardAt = performance.now();
        this.#probedAt = null;
        this.#startProbe();
        stream.on('data', (response) => this.#received(stream, response));
        stream.on('error', (error) => this.#broken(stream, error));
        stream.on('end', () => this.#broken(stream, new Error('etcd ended the watch stream')));
        this.#flush();
      },
      (error: unknown) => {
        this.#opening = false;
        if (isClosedClient(error)) {
          this.#loseAll(new WatchLostError('ETCD_WATCH_CLOSED', 'the etcd3 client was closed'));
          return;
        }
        this.#retryLater();
      },
    );
  }

  #retryLater(): void {
    if (this.#count === 0 || this.#reopen !== null) return;
    this.#reopen = setTimeout(() => {
      this.#reopen = null;
      if (this.#count > 0) this.#open();
    }, this.#backoffMs);
    // A process whose work is done must not be held open by a reconnect.
    this.#reopen.unref();
    this.#backoffMs = Math.min(MAX_BACKOFF_MS, this.#backoffMs * 2);
  }

  /** Write the creates waiting, as many as the stream takes now; the rest on its 'drain'. */
  #flush(): void {
    const stream = this.#stream;
    if (stream === null || this.#full) return;
    while (this.#sendingHead < this.#sending.length) {
      const watch = this.#sending[this.#sendingHead]!;
      this.#sending[this.#sendingHead++] = undefined as unknown as Watch;
      if (watch.state !== SENDING) continue;
      watch.id = this.#nextId++;
      watch.state = CREATING;
      this.#byId.set(watch.id, watch);
      this.#creating.push(watch);
      const request: EtcdWatchRequest = {
        create_request: {
          key: watch.key,
          ...(watch.end !== undefined && { range_end: watch.end }),
          ...(!watch.fromNow && { start_revision: watch.next.toString() }),
          watch_id: watch.id,
        },
      };
      // grpc-js's stream says false once its buffer is full (16 messages): wait for it to drain,
      // rather than hold every create of a burst as a request object in the stream's buffer.
      if ((stream.write(request) as unknown) === false && typeof stream.once === 'function') {
        this.#full = true;
        stream.once('drain', () => {
          if (stream !== this.#stream) return;
          this.#full = false;
          this.#flush();
        });
        break;
      }
    }
    if (this.#sendingHead === this.#sending.length) {
      this.#sending = [];
      this.#sendingHead = 0;
    }
  }

  #startProbe(): void {
    if (this.#probe !== null) return;
    this.#probe = setInterval(() => this.#checkAlive(), PROBE_MS);
    this.#probe.unref();
  }

  #stopProbe(): void {
    if (this.#probe !== null) clearInterval(this.#probe);
    this.#probe = null;
  }

  #checkAlive(): void {
    const stream = this.#stream;
    if (stream === null || this.#count === 0) return;
    const now = performance.now();
    if (this.#probedAt !== null && now - this.#probedAt >= PROBE_MS) {
      // Cancelled while still writable, on purpose: etcd3 then takes the member for failed (closes its
      // connections, counts a failure on its circuit breaker), so the next stream likely goes elsewhere.
      this.#broken(stream, new Error(`etcd answered nothing on the watch stream for ${Math.round(now - this.#heardAt)} ms`), (s) => s.cancel());
      return;
    }
    if (this.#probedAt === null && now - this.#heardAt >= PROBE_MS) {
      this.#probedAt = now;
      stream.write({ progress_request: {} });
    }
  }

  #received(stream: EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>, response: EtcdWatchResponse): void {
    if (stream !== this.#stream) return;
    this.#heardAt = performance.now();
    this.#probedAt = null;
    this.#backoffMs = FIRST_BACKOFF_MS;
    if (response.created) {
      this.#createdReply(response);
      return;
    }
    const id = Number(response.watch_id);
    const watch = this.#byId.get(id);
    // Not ours any more (cancelled: its late events and its cancel reply), or a progress reply (id -1).
    if (watch === undefined || watch.state !== LIVE) return;
    if (response.canceled) {
      const compacted = int64(response.compact_revision ?? '0', 'compact revision');
      this.#lose(
        watch,
        compacted > 0n
          ? new WatchLostError('ETCD_WATCH_COMPACTED', `etcd compacted its history to revision ${compacted}, past revision ${watch.next} this watch had to report from`, compacted)
          : new WatchLostError('ETCD_WATCH_CANCELED', `etcd cancelled the watch${response.cancel_reason ? `: ${response.cancel_reason}` : ''}`),
      );
      return;
    }
    const { listener } = watch;
    for (const event of response.events ?? []) {
      // The revision after each event as it is reported: all events of one revision come in one
      // reply, and a reply's header may name a revision whose events are still to come (etcd
      // catches a watch up in batches), so the header is not where a resumption starts.
      const revision = int64(event.kv.mod_revision, 'mod revision') + 1n;
      if (revision > watch.next) watch.next = revision;
      if (event.type === 'Delete') listener.deleted?.(event.kv);
      else listener.put?.(event.kv);
      // The listener may have cancelled it.
      if (watch.state !== LIVE) return;
    }
  }

  #createdReply(response: EtcdWatchResponse): void {
    const watch = this.#creating[this.#creatingHead];
    if (watch === undefined) {
      this.#broken(this.#stream!, new ProtocolError('etcd answered a watch create that was not asked for'));
      return;
    }
    this.#creating[this.#creatingHead++] = undefined as unknown as Watch;
    if (this.#creatingHead === this.#creating.length) {
      this.#creating = [];
      this.#creatingHead = 0;
    }
    if (response.canceled) {
      // Refused (its id is -1 then): the oldest create not answered, as etcd answers in order.
      this.#byId.delete(watch.id);
      this.#lose(watch, new WatchLostError('ETCD_WATCH_CANCELED', `etcd refused the watch on ${watch.key.toString('utf8')}${response.cancel_reason ? `: ${response.cancel_reason}` : ''}`));
      return;
    }
    if (Number(response.watch_id) !== watch.id) {
      this.#broken(this.#stream!, new ProtocolError(`etcd created watch ${response.watch_id} where watch ${watch.id} was asked for next`));
      return;
    }
    if (watch.state === ENDED) {
      // Cancelled while its create was in flight.
      this.#byId.delete(watch.id);
      this.#stream!.write({ cancel_request: { watch_id: watch.id } });
      return;
    }
    watch.state = LIVE;
    if (!watch.created) {
      watch.created = true;
      // From the present: etcd reports what comes after the store's revision at its creation.
      if (watch.fromNow) {
        const at = int64(response.header.revision, 'revision');
        watch.fromNow = false;
        if (at + 1n > watch.next) watch.next = at + 1n;
        watch.listener.created?.(at);
      } else {
        watch.listener.created?.(watch.next - 1n);
      }
    } else {
      watch.listener.resumed?.();
    }
  }

  /** The stream failed or ended: every watch on it waits for a new one, created from where it was. */
  #broken(stream: EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>, error: Error, close: (stream: EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>) => void = quietlyClose): void {
    if (stream !== this.#stream) return;
    this.#stream = null;
    this.#stopProbe();
    try {
      close(stream);
    } catch {
      // already closed
    }
    const again: Watch[] = [];
    for (const watch of this.#byId.values()) {
      if (watch.state === ENDED) continue;
      watch.state = SENDING;
      watch.id = 0;
      // Resumed from the revision it reached: the present at a new member may be past a deletion.
      watch.fromNow = false;
      again.push(watch);
    }
    this.#byId.clear();
    this.#creating = [];
    this.#creatingHead = 0;
    this.#sending = again.concat(this.#sending.slice(this.#sendingHead));
    this.#sendingHead = 0;
    for (const watch of again) {
      if (watch.created) watch.listener.disconnected?.(error);
    }
    this.#retryLater();
  }

  #loseAll(error: WatchLostError): void {
    const all = [...this.#byId.values(), ...this.#sending.slice(this.#sendingHead)];
    this.#byId.clear();
    this.#sending = [];
    this.#sendingHead = 0;
    for (const watch of all) this.#lose(watch, error);
  }

  #close(): void {
    const stream = this.#stream;
    this.#stream = null;
    this.#stopProbe();
    this.#byId.clear();
    this.#creating = [];
    this.#creatingHead = 0;
    if (this.#reopen !== null) clearTimeout(this.#reopen);
    this.#reopen = null;
    if (stream !== null) quietlyClose(stream);
  }
}

/**
 * End our side first, then cancel: etcd3 reports an error of a stream still
 * writable as a failure of its member (it closes every connection to it and
 * counts one failure on its circuit breaker); an ended stream's CANCELLED is
 * not reported.
 */
function quietlyClose(stream: EtcdDuplexStream<EtcdWatchRequest, EtcdWatchResponse>): void {
  try {
    stream.end();
    stream.cancel();
  } catch {
    // already closed
  }
}

const streams = new WeakMap<EtcdClient, WatchStream>();

function streamOf(etcd: EtcdClient): WatchStream {
  let stream = streams.get(etcd);
  if (stream === undefined) streams.set(etcd, (stream = new WatchStream(etcd)));
  return stream;
}

/**
 * Watch the key `key` (or the range [key, end)) on the client's shared
 * Watch stream, reporting every change from revision `from` on. With
 * `fromNow`, etcd is asked for the present instead, which it serves at once
 * (a watch from the past is caught up only every 100 ms): `from` is then
 * only the lower bound a break before its creation resumes from, and
 * `listener.created` says where it started, so that the caller can look for
 * a change between `from` and there.
 */
export function watchRange(etcd: EtcdClient, key: Buffer, end: Buffer | undefined, from: bigint, fromNow: boolean, listener: WatchListener): EtcdWatch {
  const stream = streamOf(etcd);
  const watch = new Watch(stream, key, end, from, fromNow, listener);
  stream.add(watch);
  return watch;
}

/** The client's session was closed: its Watch stream closes once no watch of it is left (a later watch opens one again). */
export function closeWatchStreamWhenIdle(etcd: EtcdClient): void {
  streams.get(etcd)?.closeWhenIdle();
}

/** How many watches of the client are live (for tests and diagnostics). */
export function liveWatchCount(etcd: EtcdClient): number {
  return streams.get(etcd)?.count ?? 0;
}
