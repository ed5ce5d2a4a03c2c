// What one fault trial counts, the same for every source and scenario, and
// the second half every trial shares: after the fault, a second client asks
// for the lock the first still holds; then both write to the fenced
// resources, the second first, the first (the stale holder) after it.
import type { Lock } from '../../src/lock.js';
import type { LockSource } from '../../src/lock-source.js';
import { retrying } from '../helpers/wait.js';
import type { Missing } from './evidence.js';
import type { Resources, Written } from './resources.js';

export interface FaultTrial {
  /**
   * What the fault's evidence failed to show (./evidence.ts): empty when the
   * fault happened and did what it is there for (e.g. the promoted replica
   * lacked the key).
   */
  readonly missing: Missing;
  /** The first holder still held the lock (lock.held) when the second asked: what makes a refusal mean something. */
  readonly firstHeld: boolean;
  /** The second client was granted the lock while the first still held it (first.held true at that moment). */
  readonly doubleGrant: boolean;
  /** The second grant's token is equal to or smaller than the first's. */
  readonly tokenRegression: boolean;
  /** The first holder's write after the second's, with its old token: did each fenced resource accept it? */
  readonly staleAccepted: Written;
}

export interface FaultScenario {
  /** What was done to the servers, for the output. */
  readonly fault: string;
  readonly trials: number;
  readonly injected: number;
  readonly firstHeld: number;
  readonly doubleGrants: number;
  readonly tokenRegressions: number;
  readonly staleAccepted: { readonly postgres: number; readonly s3: number; readonly http: number };
  /** Trials that failed (and were run again), with why. */
  readonly errors: readonly string[];
}

/**
 * After the fault: the second client tries for the lock `first` holds. If it
 * is refused (the source kept the grant), the first releases and the second
 * waits for it, so every trial compares a second grant's token with the
 * first's. Then the second writes, and the first writes again with its old
 * token: the write a fence must refuse.
 */
export async function secondHolder(first: Lock, second: LockSource, name: string, resources: Resources): Promise<Omit<FaultTrial, 'missing'>> {
  const tried = await retrying(() => second.tryAcquireLock(name, { owner: 'second' }), 60_000, `the second client's try for ${name}`);
  const firstHeld = first.held;
  const doubleGrant = tried !== null && firstHeld;
  let next = tried;
  try {
    if (next === null) {
      await first.release().catch(() => {});
      next = await retrying(() => second.acquireLock(name, { owner: 'second', timeoutMs: 30_000 }), 60_000, `the second client's grant of ${name}`);
    }
    const tokenRegression = next.token <= first.token;
    await resources.writeFenced(name, next.token, 'second');
    const staleAccepted = await resources.writeFenced(name, first.token, 'first, stale');
    return { firstHeld, doubleGrant, tokenRegression, staleAccepted };
  } finally {
    await next?.release().catch(() => {});
    await first.release().catch(() => {});
  }
}

/**
 * `trials` runs of `trial`, one after the other (each breaks and restores
 * shared nodes); a trial that throws is run again, up to `trials` extra runs
 * in all, after `recover` has put the servers back as a trial expects them
 * (a trial that failed half-way may have left a node down).
 */
export async function runTrials(
  fault: string,
  trials: number,
  trial: (i: number) => Promise<FaultTrial>,
  recover: () => Promise<unknown>,
  log: (line: string) => void,
): Promise<FaultScenario> {
  const done: FaultTrial[] = [];
  const errors: string[] = [];
  for (let i = 0; done.length < trials && errors.length <= trials; i++) {
    try {
      const t = await trial(i);
      done.push(t);
      if (t.missing.length > 0) log(`  trial ${i + 1}: its fault was not shown by its evidence: ${t.missing.join('; ')}`);
    } catch (error) {
      errors.push((error as Error).message.split('\n')[0] ?? String(error));
      log(`  trial ${i + 1} failed (run again): ${errors.at(-1)}`);
      await recover();
    }
  }
  const count = (f: (t: FaultTrial) => boolean): number => done.filter(f).length;
  return {
    fault,
    trials: done.length,
    injected: count((t) => t.missing.length === 0),
    firstHeld: count((t) => t.firstHeld),
    doubleGrants: count((t) => t.doubleGrant),
    tokenRegressions: count((t) => t.tokenRegression),
    staleAccepted: {
      postgres: count((t) => t.staleAccepted.postgres),
      s3: count((t) => t.staleAccepted.s3),
      http: count((t) => t.staleAccepted.http),
    },
    errors,
  };
}
