// The shared maxHoldMs clock of the HTTP guards: holds expire in order, at
// their own deadline (not the first hold's), an ended hold never expires,
// and the clock arms itself again after its oldest hold ended early.
import { describe, expect, it } from 'vitest';
import { HoldClock } from '../../src/shared/http/hold-clock.js';

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('HoldClock', () => {
  it('expires each hold at its own deadline, oldest first; an ended hold never', async () => {
    const clock = new HoldClock(60);
    const fired: { name: string; at: number }[] = [];
    const t0 = performance.now();
    const fire = (arg: object): void => void fired.push({ name: (arg as { name: string }).name, at: performance.now() - t0 });
    const a = clock.start(fire, { name: 'a' });
    await sleep(30);
    const b = clock.start(fire, { name: 'b' });
    clock.start(fire, { name: 'c' });
    // The oldest ends early: the timer armed for it must be armed again for b.
    a.end();
    b.end();
    await sleep(150);
    expect(fired.map((f) => f.name)).toEqual(['c']);
    // c was started 30 ms after a: its deadline is its own, not a's.
    expect(fired[0]!.at).toBeGreaterThanOrEqual(89);
    a.end(); // ending twice, or after the clock let go, changes nothing
  });

  it('holds started while others run keep FIFO order and all expire', async () => {
    const clock = new HoldClock(20);
    const fired: string[] = [];
    const fire = (arg: object): void => void fired.push((arg as { name: string }).name);
    for (const name of ['1', '2', '3']) {
      clock.start(fire, { name });
      await sleep(5);
    }
    const ended = clock.start(fire, { name: 'ended' });
    ended.end();
    await sleep(80);
    expect(fired).toEqual(['1', '2', '3']);
  });
});
