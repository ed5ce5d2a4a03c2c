// fencekeeper/redis's timeouts of one length on one timer (src/shared/redis/deadlines.ts):
// the node timeout of every command and every grant's watchdog tick. What is
// checked is which entries expire and in what order, never how long they took.
import { describe, expect, it } from 'vitest';
import { NodeTimeoutError, send, type RedisClient } from '../../src/shared/redis/client.js';
import { Deadline, Deadlines } from '../../src/shared/redis/deadlines.js';

/** An entry that records its expiry in `log`, and runs `then` after. */
class Recorded extends Deadline {
  constructor(
    readonly label: string,
    readonly log: string[],
    readonly then: () => void = () => {},
  ) {
    super();
  }

  override expired(): void {
    this.log.push(this.label);
    this.then();
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Resolves when `log` has `n` entries. */
async function untilLogged(log: string[], n: number): Promise<void> {
  while (log.length < n) await sleep(5);
}

describe('timeouts of one length', () => {
  it('expire in the order they (re)started; a cancelled one never does', async () => {
    const list = new Deadlines(20);
    const log: string[] = [];
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((label) => new Recorded(label, log)) as [Recorded, Recorded, Recorded, Recorded];
    list.start(a);
    list.start(b);
    list.start(c);
    list.start(d);
    b.cancel();
    list.start(a); // started again: now the newest
    d.cancel();
    await untilLogged(log, 2);
    await sleep(60);
    expect(log).toEqual(['c', 'a']);
    expect([a.list, b.list, c.list, d.list]).toEqual([null, null, null, null]);
  });

  it('the oldest cancelled: the timer armed for it still expires the next one, and runs again for later ones', async () => {
    const list = new Deadlines(15);
    const log: string[] = [];
    const first = new Recorded('first', log);
    list.start(first);
    await sleep(5);
    list.start(new Recorded('second', log));
    first.cancel();
    await untilLogged(log, 1);
    // The list was empty after that: a new entry arms the timer again.
    list.start(new Recorded('third', log));
    await untilLogged(log, 2);
    expect(log).toEqual(['second', 'third']);
  });

  it('an entry that starts another of the same length as it expires: an older entry still expires at its own deadline, before the new one', async () => {
    // A (due at 60) starts C when it expires (due at 120); B (due at 80) must not wait for C's deadline.
    // The marker, a timer of its own set when A expires, is due at 110: between the two.
    const list = new Deadlines(60);
    const log: string[] = [];
    const c = new Recorded('C', log);
    const a = new Recorded('A', log, () => {
      list.start(c);
      setTimeout(() => log.push('marker'), 50);
    });
    list.start(a);
    await sleep(20);
    list.start(new Recorded('B', log));
    await untilLogged(log, 4);
    expect(log).toEqual(['A', 'B', 'marker', 'C']);
  });
});

describe('the node timeout of send', () => {
  it('commands on one timeout: an answered one ahead of a silent one leaves the silent one its timeout, each silent one fails on its own', async () => {
    const answers: Array<(value: unknown) => void> = [];
    const client = { call: () => new Promise((resolve) => answers.push(resolve)), duplicate: () => ({}) } as unknown as RedisClient;
    const answered = send(client, 'h:1', 'get', ['a'], 25);
    const silent = send(client, 'h:1', 'get', ['b'], 25).catch((e: unknown) => e);
    const alsoAnswered = send(client, 'h:1', 'get', ['c'], 25);
    const alsoSilent = send(client, 'h:1', 'get', ['d'], 25).catch((e: unknown) => e);
    answers[0]?.('A');
    answers[2]?.('C');
    expect(await answered).toBe('A');
    expect(await alsoAnswered).toBe('C');
    const [one, two] = await Promise.all([silent, alsoSilent]);
    expect(one).toBeInstanceOf(NodeTimeoutError);
    expect(two).toBeInstanceOf(NodeTimeoutError);
    expect((one as Error).message).toBe('Redis at h:1 did not answer GET within 25 ms');
    // An answer after the timeout changes nothing.
    answers[1]?.('late');
  });
});
