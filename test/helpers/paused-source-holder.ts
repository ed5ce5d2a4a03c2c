// One paused holder of any token source, the steps the paused-holder test
// and npm run compare share: test/fixtures/source-holder.mjs takes the lock
// from the source's URL, is SIGSTOPped, the next holder is granted the lock
// (only once the source ended the stopped holder's grant) and writes, the
// holder is SIGCONTed and writes with its old token; what it reports comes
// back with the tokens. No vitest here: the compare script loads it too.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Lock } from '../../src/lock.js';
import { spawnHolder, type HolderProcess } from '../../src/testing/index.js';
import type { FencingToken } from '../../src/token.js';
import type { SourceUnderTest } from './sources.js';
import { retrying, within } from './wait.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/source-holder.mjs', import.meta.url));

/** What the resumed holder reports of its first check and its writes (outcome: 'written' or an error code; http: the status). */
export interface SourceHolderWrite {
  readonly held: boolean;
  readonly aborted: boolean;
  readonly reason: string | null;
  readonly token: FencingToken;
  readonly postgres: string;
  readonly s3: string;
  readonly http: number;
  /** With FK_UNFENCED_TABLE and FK_UNFENCED_URL: the same write, nothing checked. */
  readonly unfenced?: { readonly postgres: string; readonly s3: string; readonly http: number };
}

export interface PausedRun {
  /** The stopped holder's token. */
  readonly oldToken: FencingToken;
  /** The next holder's token. */
  readonly nextToken: FencingToken;
  /** The kernel showed the holder stopped when the next holder was granted the lock. */
  readonly stoppedAtGrant: boolean;
  /** The next holder's lock.held once the old one had written (it released after). */
  readonly nextHeldAfter: boolean;
  readonly report: SourceHolderWrite;
}

export interface PausedRunOptions {
  readonly lock: string;
  /** The holder's environment on top of this process's: its resources (FK_RESOURCE, FK_BUCKET, FK_URL...) and servers. */
  readonly env: Record<string, string>;
  /** The next holder's writes, done while the old holder is stopped. */
  whileStopped(next: Lock): Promise<void>;
  /** Every holder spawned, for a caller that stops strays in its teardown. */
  readonly holders?: HolderProcess[];
  /** The holder program; default test/fixtures/source-holder.mjs (its report is then a SourceHolderWrite). */
  readonly fixture?: string;
}

export function processStopped(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'T' || state === 't';
  } catch {
    return false;
  }
}

export async function pauseSourceHolder(sut: SourceUnderTest, options: PausedRunOptions): Promise<PausedRun> {
  const holder = await spawnHolder(options.fixture ?? FIXTURE, {
    env: { ...process.env, FK_LOCK_SERVICE: sut.lockService, FK_SESSION_MS: String(sut.grantMs), FK_LOCK: options.lock, ...options.env },
  });
  options.holders?.push(holder);
  try {
    const { token: oldToken } = await within(holder.holding, 60_000, `the holder to get ${options.lock} from ${sut.lockService}`);
    await holder.pause();
    const { source, close } = await sut.open();
    let run: PausedRun;
    try {
      // Granted only once the source has ended the stopped holder's grant. Retried: on a
      // loaded machine one Redis round trip can outlast the node timeout (100 ms at a 2 s TTL).
      const limit = sut.grantMs * 10 + 30_000;
      const next = await retrying(() => source.acquireLock(options.lock, { owner: 'successor', timeoutMs: limit }), limit, `the successor's grant of ${options.lock}`);
      const stoppedAtGrant = processStopped(holder.pid);
      await options.whileStopped(next);
      holder.send('write'); // read by the holder once it runs again
      holder.resume();
      const report = (await within(holder.next(), 60_000, "the resumed holder's report")) as SourceHolderWrite;
      run = { oldToken, nextToken: next.token, stoppedAtGrant, nextHeldAfter: next.held, report };
      await next.release();
    } finally {
      await close();
    }
    holder.send('exit');
    await within(holder.exited, 30_000, 'the holder to exit');
    return run;
  } catch (error) {
    await holder.stop();
    // What the holder said on its way out is the only clue to why it went.
    const said = holder.stderr().trim().split('\n').slice(-3).join(' | ');
    throw said === '' ? error : new Error(`${(error as Error).message} (holder's stderr: ${said})`, { cause: error });
  }
}
