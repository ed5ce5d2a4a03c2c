// The step-down clock on its own, with a deadline source the test drives (as
// a Redis watchdog or an etcd keepalive would): held read synchronously, the
// signal aborting at the deadline and on losses, deadlines that move on, one
// timer per clock. Timings are real; bounds are one-sided (never early).
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CHANNELS, type LockEndedMessage, type LockHeldMessage } from '../../src/diagnostics.js';
import { InvalidArgumentError, LockLostError, type LossReason } from '../../src/errors.js';
import { StepDownClock, safetyMargin } from '../../src/step-down.js';

const source = { name: 'TestSource', grant: 'lease' } as const;

function spin(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // a pause the event loop cannot interrupt: no timer runs meanwhile
  }
}

function aborted(signal: AbortSignal): Promise<{ at: number; reason: LockLostError }> {
  return new Promise((resolve) => {
    signal.addEventListener('abort', () => resolve({ at: performance.now(), reason: signal.reason as LockLostError }), { once: true });
  });
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('StepDownClock', () => {
  it('held turns false at the deadline without any timer having run (a paused holder sees it at once)', () => {
    const clock = new StepDownClock(source);
    const acked = performance.now();
    const holding = clock.hold({ lock: 'jobs/a', marginMs: 20, deadline: () => acked + 60 });
    expect(holding.held).toBe(true);
    spin(60);
    // Still inside this synchronous run: the clock's timer cannot have fired.
    expect(holding.signal.aborted).toBe(false);
    expect(holding.held).toBe(false);
    const reason = holding.signal.reason as LockLostError;
    expect(reason).toBeInstanceOf(LockLostError);
    expect(reason.reason).toBe('deadline');
    expect(reason.lock).toBe('jobs/a');
    expect(reason.message).toBe('lock jobs/a lost: no reply from TestSource in time: the lease may expire at any moment (stepped down 20 ms before the earliest expiry)');
  });

  it('the signal aborts from the timer at deadline - margin, never before', async () => {
    const clock = new StepDownClock(source);
    const acked = performance.now();
    const holding = clock.hold({ lock: 'jobs/b', marginMs: 30, deadline: () => acked + 80 });
    // (acked + 80) - 30 and acked + 50 may differ in the last bit of a double: compare to a nanosecond.
    expect(holding.deadline).toBeCloseTo(acked + 50, 6);
    const { at, reason } = await aborted(holding.signal);
    expect(at).toBeGreaterThanOrEqual(holding.deadline);
    expect(reason.reason).toBe('deadline');
    expect(holding.held).toBe(false);
  }, 10_000);

  it('a deadline that acknowledgements move on keeps the holding; it ends once they stop', async () => {
    // The test owns the clock the holding reads (performance.now), so a
    // loaded machine cannot make a renewal late; the clock's own timer still
    // runs on real time, and is given real time to fire between steps.
    let now = 1_000_000;
    vi.spyOn(performance, 'now').mockImplementation(() => now);
    const clock = new StepDownClock(source);
    let acked = now;
    const holding = clock.hold({ lock: 'jobs/c', marginMs: 10, deadline: () => acked + 60 });
    const end = aborted(holding.signal);
    // Renew every 15 ms of test time for 300 ms: several times the 50 ms the holding would last unrenewed.
    for (let i = 0; i < 20; i++) {
      now += 15;
      await new Promise((r) => setTimeout(r, 5));
      expect(holding.held).toBe(true);
      acked = now;
    }
    const lastAck = acked;
    now = lastAck + 49; // 1 ms before the step-down instant: never early
    await new Promise((r) => setTimeout(r, 80));
    expect(holding.signal.aborted).toBe(false);
    now = lastAck + 50; // the timer ends it, with nothing read by the test
    const { at, reason } = await end;
    expect(reason.reason).toBe('deadline');
    expect(at).toBe(lastAck + 50);
    expect(holding.held).toBe(false);
  }, 10_000);

  it('one timer per clock, however many holdings it has; none once they have ended', () => {
    const live = new Set<unknown>();
    const realSet = globalThis.setTimeout;
    const realClear = globalThis.clearTimeout;
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, ms?: number) => {
      const handle = realSet(() => {
        live.delete(handle);
        fn();
      }, ms);
      live.add(handle);
      return handle;
    }) as typeof setTimeout);
    vi.spyOn(globalThis, 'clearTimeout').mockImplementation(((handle: NodeJS.Timeout) => {
      live.delete(handle);
      realClear(handle);
    }) as typeof clearTimeout);

    const clock = new StepDownClock(source);
    const acked = performance.now();
    const holdings = Array.from({ length: 100 }, (_, i) => clock.hold({ lock: `jobs/${i}`, marginMs: 0, deadline: () => acked + 10_000 + i }));
    expect(live.size).toBe(1);
    for (const h of holdings) h.lose('released');
    expect(live.size).toBe(0);
  });

  it('end() ends every current holding with the source\'s reason; a later holding is unaffected', () => {
    const clock = new StepDownClock(source);
    const deadline = (): number => performance.now() + 60_000;
    const a = clock.hold({ lock: 'jobs/a', marginMs: 0, deadline });
    const b = clock.hold({ lock: 'jobs/b', marginMs: 0, deadline });
    clock.end('session_expired');
    for (const h of [a, b]) {
      expect(h.held).toBe(false);
      const reason = h.signal.reason as LockLostError;
      expect(reason.reason).toBe('session_expired');
      expect(reason.message).toBe(`lock ${reason.lock} lost: the TestSource lease expired`);
    }
    const later = clock.hold({ lock: 'jobs/c', marginMs: 0, deadline });
    expect(later.held).toBe(true);
    later.lose('released');
  });

  it('lose(): the first reason wins, a detail replaces the default explanation', () => {
    const clock = new StepDownClock(source);
    const holding = clock.hold({ lock: 'jobs/d', marginMs: 0, deadline: () => performance.now() + 60_000 });
    holding.lose('renewal_failed', 'the key holds another value');
    holding.lose('released');
    const reason = holding.signal.reason as LockLostError;
    expect(reason.reason).toBe('renewal_failed');
    expect(reason.message).toBe('lock jobs/d lost: the key holds another value');
  });

  it('a source that reports itself ended ends its holdings at the next held read', () => {
    let ended: LossReason | null = null;
    const clock = new StepDownClock({ ...source, ended: () => ended });
    const holding = clock.hold({ lock: 'jobs/e', marginMs: 0, deadline: () => performance.now() + 60_000 });
    expect(holding.held).toBe(true);
    ended = 'closed';
    expect(holding.held).toBe(false);
    expect((holding.signal.reason as LockLostError).reason).toBe('closed');
    expect((holding.signal.reason as LockLostError).message).toBe('lock jobs/e lost: the TestSource client was closed');
  });

  it("a source's cause is carried by a loss and named in its message; a release and a deletion carry none", () => {
    let cause: Error | null = null;
    const clock = new StepDownClock({ ...source, cause: () => cause });
    const far = (): number => performance.now() + 60_000;
    const released = clock.hold({ lock: 'jobs/f', marginMs: 0, deadline: far });
    const deleted = clock.hold({ lock: 'jobs/g', marginMs: 0, deadline: far });
    const healthy = clock.hold({ lock: 'jobs/h', marginMs: 0, deadline: far });
    healthy.lose('session_expired');
    expect((healthy.signal.reason as LockLostError).cause).toBeUndefined();
    cause = new Error('TLS to zk2:2281 failed: self-signed certificate in certificate chain');
    released.lose('released');
    deleted.lose('node_deleted');
    expect((released.signal.reason as LockLostError).cause).toBeUndefined();
    expect((deleted.signal.reason as LockLostError).cause).toBeUndefined();
    const lost = clock.hold({ lock: 'jobs/i', marginMs: 0, deadline: far });
    clock.end('session_expired');
    const reason = lost.signal.reason as LockLostError;
    expect(reason.cause).toBe(cause);
    expect(reason.message).toBe(`lock jobs/i lost: the TestSource lease expired (last connection error: ${cause.message})`);
  });
});

describe('StepDownClock: what a holding makes only for a reader', () => {
  it('a holding acquired and released without a look at its signal makes no AbortController; read after, the signal is aborted with the release', () => {
    let made = 0;
    const Real = globalThis.AbortController;
    vi.stubGlobal('AbortController', class extends Real {
      constructor() {
        super();
        made++;
      }
    });
    try {
      quietHolding(() => made);
    } finally {
      vi.unstubAllGlobals();
    }
  });

  function quietHolding(made: () => number): void {
    const ends: LossReason[] = [];
    const holding = new StepDownClock(source).hold({ lock: 'jobs/quiet', marginMs: 0, deadline: () => performance.now() + 60_000, onEnd: (reason) => void ends.push(reason) });
    expect(holding.held).toBe(true);
    holding.lose('released');
    holding.lose('deadline');
    expect(made()).toBe(0);
    expect(holding.ended).toBe(true);
    expect(ends).toEqual(['released']);
    expect(holding.signal.aborted).toBe(true);
    expect((holding.signal.reason as LockLostError).reason).toBe('released');
    expect(made()).toBe(1);
  }

  it('onEnd is told the reason before a signal read earlier aborts', () => {
    const order: string[] = [];
    const holding = new StepDownClock(source).hold({ lock: 'jobs/told', marginMs: 0, deadline: () => performance.now() + 60_000, onEnd: (reason) => void order.push(`onEnd ${reason}`) });
    holding.signal.addEventListener('abort', () => order.push(`abort ${(holding.signal.reason as LockLostError).reason}`));
    holding.lose('renewal_failed');
    expect(order).toEqual(['onEnd renewal_failed', 'abort renewal_failed']);
  });
});

describe('StepDownClock: losses after the deadline', () => {
  it('an end the source reports after the deadline passed (a paused process hears of the expiry before its timer runs) is a loss at the deadline', () => {
    let ended: LossReason | null = null;
    const clock = new StepDownClock({ ...source, ended: () => ended });
    const acked = performance.now();
    const a = clock.hold({ lock: 'jobs/late', marginMs: 10, deadline: () => acked + 40 });
    const b = clock.hold({ lock: 'jobs/late2', marginMs: 10, deadline: () => acked + 40 });
    const c = clock.hold({ lock: 'jobs/early', marginMs: 0, deadline: () => performance.now() + 60_000 });
    spin(40);
    clock.end('session_expired');
    expect((a.signal.reason as LockLostError).reason).toBe('deadline');
    expect((b.signal.reason as LockLostError).message).toContain('no reply from TestSource in time');
    // Before its deadline the source's reason stands.
    expect((c.signal.reason as LockLostError).reason).toBe('session_expired');
    // A holding read through a source that already reports itself ended, past its deadline, too.
    const d = new StepDownClock({ ...source, ended: () => ended }).hold({ lock: 'jobs/d', marginMs: 0, deadline: () => acked });
    ended = 'session_expired';
    expect(d.held).toBe(false);
    expect((d.signal.reason as LockLostError).reason).toBe('deadline');
  });

  it('a release after the deadline is still a release', () => {
    const acked = performance.now();
    const holding = new StepDownClock(source).hold({ lock: 'jobs/rel', marginMs: 0, deadline: () => acked });
    holding.lose('released');
    expect((holding.signal.reason as LockLostError).reason).toBe('released');
  });
});

describe('StepDownClock diagnostics', () => {
  function listen(name: string): { messages: unknown[]; stop: () => void } {
    const messages: unknown[] = [];
    const onMessage = (m: unknown): void => void messages.push(m);
    subscribe(name, onMessage);
    return { messages, stop: () => unsubscribe(name, onMessage) };
  }

  it('a holding publishes held when it begins and lost with the deadline reason, before its signal aborts, when a pause ran past its deadline', () => {
    const held = listen(CHANNELS.lockHeld);
    const lost = listen(CHANNELS.lockLost);
    const released = listen(CHANNELS.lockReleased);
    try {
      const clock = new StepDownClock({ ...source, kind: 'test' });
      const acked = performance.now();
      const holding = clock.hold({ lock: 'jobs/diag', marginMs: 10, deadline: () => acked + 40, token: 42n });
      expect(held.messages).toEqual([{ source: 'test', lock: 'jobs/diag', token: 42n } satisfies LockHeldMessage]);
      let lostBeforeAbort: number | undefined;
      holding.signal.addEventListener('abort', () => (lostBeforeAbort = lost.messages.length));
      spin(40);
      expect(holding.held).toBe(false);
      expect(lost.messages).toHaveLength(1);
      const message = lost.messages[0] as LockEndedMessage;
      expect(message).toMatchObject({ source: 'test', lock: 'jobs/diag', token: 42n, reason: 'deadline' });
      expect(message.heldMs).toBeGreaterThanOrEqual(30);
      expect(message.error).toBe(holding.signal.reason);
      expect(lostBeforeAbort, 'the loss was published before the abort listeners ran').toBe(1);
      expect(released.messages).toEqual([]);
    } finally {
      held.stop();
      lost.stop();
      released.stop();
    }
  });

  it('a release goes to the released channel, not lost; a source without a kind is named by its name in lower case; every end is published once', () => {
    const lost = listen(CHANNELS.lockLost);
    const released = listen(CHANNELS.lockReleased);
    try {
      const clock = new StepDownClock(source);
      const a = clock.hold({ lock: 'jobs/r', marginMs: 0, deadline: () => performance.now() + 60_000 });
      a.lose('released');
      a.lose('deadline');
      const b = clock.hold({ lock: 'jobs/s', marginMs: 0, deadline: () => performance.now() + 60_000 });
      clock.end('session_expired');
      void b.held;
      expect(released.messages).toHaveLength(1);
      expect(released.messages[0]).toMatchObject({ source: 'testsource', lock: 'jobs/r', reason: 'released' });
      expect(released.messages[0]).not.toHaveProperty('token');
      expect(lost.messages).toHaveLength(1);
      expect(lost.messages[0]).toMatchObject({ source: 'testsource', lock: 'jobs/s', reason: 'session_expired' });
    } finally {
      lost.stop();
      released.stop();
    }
  });
});

describe('safetyMargin', () => {
  it('defaults to a quarter of the timeout and accepts [0, two thirds)', () => {
    expect(safetyMargin(10_000, undefined)).toBe(2500);
    expect(safetyMargin(10_000, 0)).toBe(0);
    expect(safetyMargin(10_000, 6666)).toBe(6666);
  });

  it('refuses a margin that would step a healthy holder down between two renewals, or no number', () => {
    for (const bad of [6667, 10_000, -1, Number.NaN, Number.POSITIVE_INFINITY, '100' as unknown as number]) {
      expect(() => safetyMargin(10_000, bad), String(bad)).toThrow(InvalidArgumentError);
    }
  });
});
