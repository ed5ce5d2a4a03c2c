// The core's fair-queue join (src/queue-join.ts) with scripted steps: every
// way a wait ends - the turn, the entry gone, a failed request, the caller's
// abort and timeout, the client's end - and what each leaves: the entry
// abandoned unless granted, and the wait's stop out of its client's group and
// its signal's set (a later stopAll or abort reaches nothing). Both ways a
// source may wait: waitForTurn (a promise, etcd and PostgreSQL) and
// awaitTurn (a state object told once, ZooKeeper), with the same outcomes.
// The steps are fakes: what is checked is the template's order and cleanup,
// the sources' own requests are tested against their servers.
import { describe, expect, it } from 'vitest';
import { LockTimeoutError } from '../../src/errors.js';
import { joinQueue, type QueueJoinSteps, type QueueTurn } from '../../src/queue-join.js';
import { WaitGroup, type QueueStopper, type StopReceiver } from '../../src/queue-stopper.js';

interface Entry {
  readonly id: number;
}
interface Grant {
  readonly held: boolean;
  readonly entry: Entry;
}

let entries = 0;

/** One scripted join that waits: its steps, and the handles a test ends the wait with. */
function scripted(style: 'promise' | 'state', options: { signal?: AbortSignal; timeoutMs?: number; waits?: WaitGroup } = {}) {
  const waits = options.waits ?? new WaitGroup();
  const entry: Entry = { id: ++entries };
  const abandoned: Entry[] = [];
  /** How often the waiter heard of a stop (a state waiter listens with stopper.tell). */
  let stopsHeard = 0;
  let settle: { arrived(outcome: 'turn' | 'gone'): void; failed(error: unknown): void } | null = null;
  let waiting!: () => void;
  const started = new Promise<void>((resolve) => (waiting = resolve));
  const steps: QueueJoinSteps<Entry, 'behind', never, Grant> = {
    kind: 'lock',
    name: `unit/${entry.id}`,
    mode: 'wait',
    client: {},
    waits,
    signal: options.signal,
    timeoutMs: options.timeoutMs,
    enter: () => Promise.resolve(entry),
    place: () => 'behind',
    waitForTurn: (_joined, _wait, stopper) =>
      new Promise<'turn' | 'gone'>((resolve, reject) => {
        settle = { arrived: resolve, failed: reject };
        stopper.onStop(reject);
        waiting();
      }),
    lost: (joined) => new Error(`entry ${joined.id} gone`),
    build: (joined) => ({ held: true, entry: joined as Entry }),
    abandon: async (joining) => {
      const joined = await joining;
      if (joined !== null) abandoned.push(joined);
    },
  };
  if (style === 'state') {
    steps.awaitTurn = (_joined: Entry, _wait: 'behind', stopper: QueueStopper, turn: QueueTurn): void => {
      let over = false;
      const end = (): QueueTurn | null => {
        if (over) return null;
        over = true;
        return turn;
      };
      const receiver: StopReceiver = {
        stopped: (reason) => {
          stopsHeard++;
          end()?.failed(reason);
        },
      };
      stopper.tell(receiver);
      settle = { arrived: (outcome) => end()?.arrived(outcome), failed: (error) => end()?.failed(error) };
      waiting();
    };
  }
  return {
    steps,
    waits,
    entry,
    abandoned,
    started,
    stopsHeard: () => stopsHeard,
    get settle() {
      if (settle === null) throw new Error('the wait has not started');
      return settle;
    },
  };
}

describe.each(['promise', 'state'] as const)('joinQueue, a wait by %s', (style) => {
  it('the turn: granted, nothing abandoned, and the stop left its group and its signal', async () => {
    const ac = new AbortController();
    const join = scripted(style, { signal: ac.signal, timeoutMs: 60_000 });
    const granting = joinQueue(join.steps);
    await join.started;
    join.settle.arrived('turn');
    const grant = await granting;
    expect(grant).toEqual({ held: true, entry: join.entry });
    expect(join.abandoned).toEqual([]);
    // A stop of the client's group or of the caller's signal after the grant reaches nothing.
    join.waits.stopAll(new Error('session ended'));
    ac.abort(new Error('too late'));
    expect(join.stopsHeard()).toBe(0);
  });

  it('our entry gone while waiting: the lost error, and the entry abandoned', async () => {
    const join = scripted(style);
    const granting = joinQueue(join.steps);
    await join.started;
    join.settle.arrived('gone');
    await expect(granting).rejects.toThrow(`entry ${join.entry.id} gone`);
    expect(join.abandoned).toEqual([join.entry]);
  });

  it('a failed request: rejects with its error after abandoning the entry', async () => {
    const join = scripted(style);
    const granting = joinQueue(join.steps);
    await join.started;
    const error = new Error('listing failed');
    join.settle.failed(error);
    await expect(granting).rejects.toBe(error);
    expect(join.abandoned).toEqual([join.entry]);
  });

  it("the caller's abort: rejects with its reason, abandons the entry once, and a later stopAll reaches nothing", async () => {
    const ac = new AbortController();
    const join = scripted(style, { signal: ac.signal });
    const granting = joinQueue(join.steps);
    await join.started;
    const why = new Error('caller gave up');
    ac.abort(why);
    await expect(granting).rejects.toBe(why);
    expect(join.abandoned).toEqual([join.entry]);
    // A turn told after the stop (a watch firing late) changes nothing.
    join.settle.arrived('turn');
    join.waits.stopAll(new Error('session ended'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(join.abandoned).toEqual([join.entry]);
    if (style === 'state') expect(join.stopsHeard()).toBe(1);
  });

  it("the caller's timeout: LockTimeoutError naming the lock, the entry abandoned", async () => {
    const join = scripted(style, { timeoutMs: 20 });
    const granting = joinQueue(join.steps);
    await join.started;
    await expect(granting).rejects.toBeInstanceOf(LockTimeoutError);
    await expect(granting).rejects.toThrow(join.steps.name);
    expect(join.abandoned).toEqual([join.entry]);
  });

  it("the client's end (its group stopped): rejects with that reason, the entry abandoned; the other waits of the group end too", async () => {
    const waits = new WaitGroup();
    const one = scripted(style, { waits });
    const two = scripted(style, { waits });
    const first = joinQueue(one.steps);
    const second = joinQueue(two.steps);
    await Promise.all([one.started, two.started]);
    const ended = new Error('session expired');
    waits.stopAll(ended);
    await expect(first).rejects.toBe(ended);
    await expect(second).rejects.toBe(ended);
    expect(one.abandoned).toEqual([one.entry]);
    expect(two.abandoned).toEqual([two.entry]);
  });

  it('a signal aborted before the wait starts: no wait is left running', async () => {
    const ac = new AbortController();
    const join = scripted(style, { signal: ac.signal });
    const why = new Error('before the wait');
    // Aborted between the join's entry and its wait: enter resolves, then the abort lands.
    const steps = { ...join.steps, enter: () => Promise.resolve(join.entry).finally(() => ac.abort(why)) };
    if (join.steps.awaitTurn !== undefined) Object.assign(steps, { awaitTurn: join.steps.awaitTurn });
    await expect(joinQueue(steps)).rejects.toBe(why);
    expect(join.abandoned).toEqual([join.entry]);
  });
});
