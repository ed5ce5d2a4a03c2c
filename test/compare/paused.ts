// Scenario 3, the paused holder, for every source of test/helpers/sources.ts
// (SOURCES: the sources of the paused-holder test, with its grant lifetimes):
// a holder process (test/fixtures/source-holder.mjs) takes the lock, is
// SIGSTOPped, the source ends its grant (a session expires, a TTL runs out)
// and the next holder is granted the lock and writes; the holder is resumed
// with SIGCONT and writes with its old token, to the fenced resources and to
// the plain ones. Counted per resource: the stale write accepted, fencing off
// (the plain resource keeps the stale holder's value over the newer one's)
// and fencing on (the fence let it through). Trials run concurrently: each
// has its own lock name and resources, and most of a trial is waiting for a
// grant to end.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { spawnHolder } from '../../src/testing/index.js';
import type { FencingToken } from '../../src/token.js';
import { environmentServers } from '../helpers/server-env.js';
import type { SourceUnderTest } from '../helpers/sources.js';
import { uniqueLockName } from '../helpers/unique.js';
import { within } from '../helpers/wait.js';
import type { Resources, Written } from './resources.js';
import { retrying } from './trial.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/source-holder.mjs', import.meta.url));

export interface PausedTrial {
  /** The holder was stopped (the kernel showed it so) when the successor was granted the lock. */
  readonly injected: boolean;
  /** The holder's first check after SIGCONT: lock.held. */
  readonly heldAfterResume: boolean;
  /** The successor's token is equal to or smaller than the paused holder's. */
  readonly tokenRegression: boolean;
  readonly fencingOff: Written;
  readonly fencingOn: Written;
}

export interface PausedScenario {
  readonly fault: string;
  /** Where the source ran (the paused-holder test's servers). */
  readonly deployment: string;
  readonly grantMs: number;
  readonly trials: number;
  readonly injected: number;
  readonly heldAfterResume: number;
  readonly tokenRegressions: number;
  readonly fencingOff: { readonly postgres: number; readonly s3: number; readonly http: number };
  readonly fencingOn: { readonly postgres: number; readonly s3: number; readonly http: number };
  readonly errors: readonly string[];
}

interface HolderWrite {
  readonly held: boolean;
  readonly token: FencingToken;
  readonly postgres: string;
  readonly s3: string;
  readonly http: number;
}

function stopped(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return state === 'T' || state === 't';
  } catch {
    return false;
  }
}

function holderEnvironment(): Record<string, string> {
  const s = environmentServers();
  return {
    DATABASE_URL: s.databaseUrl,
    S3_ENDPOINT: s.s3.endpoint,
    S3_REGION: s.s3.region,
    S3_ACCESS_KEY: s.s3.credentials.accessKeyId,
    S3_SECRET_KEY: s.s3.credentials.secretAccessKey,
  };
}

export async function pausedTrial(sut: SourceUnderTest, resources: Resources): Promise<PausedTrial> {
  const name = uniqueLockName(`cmp_paused_${sut.kind}`);
  const holder = await spawnHolder(FIXTURE, {
    env: {
      ...process.env,
      ...holderEnvironment(),
      FK_LOCK_SERVICE: sut.lockService,
      FK_SESSION_MS: String(sut.grantMs),
      FK_LOCK: name,
      FK_RESOURCE: `compare/${name}`,
      FK_BUCKET: resources.bucket,
      FK_URL: resources.fencedUrl(name),
      FK_UNFENCED_TABLE: resources.table,
      FK_UNFENCED_URL: resources.plainUrl(name),
    },
  });
  try {
    const { token: old } = await within(holder.holding, 60_000, `the holder to get ${name} from ${sut.lockService}`);
    await holder.pause();
    const { source, close } = await sut.open();
    try {
      // Retried: on a loaded machine one Redis round trip can outlast the node timeout (100 ms at a 2 s TTL).
      const next = await retrying(() => source.acquireLock(name, { owner: 'successor', timeoutMs: sut.grantMs * 10 + 30_000 }), sut.grantMs * 10 + 30_000, `the successor's grant of ${name}`);
      const injected = stopped(holder.pid);
      await resources.writeFenced(name, next.token, 'successor');
      await resources.writePlain(name, next.token);
      holder.send('write'); // read by the holder once it runs again
      holder.resume();
      const report = (await within(holder.next(), 60_000, "the resumed holder's report")) as HolderWrite;
      if (report.token !== old) throw new Error(`the holder wrote with ${report.token}, it reported holding ${old}`);
      const fencingOff = await resources.plainHolds(name, old);
      const fencingOn = { postgres: report.postgres === 'written', s3: report.s3 === 'written', http: report.http === 200 };
      for (const [where, outcome] of [['postgres', report.postgres], ['s3', report.s3]] as const) {
        if (outcome !== 'written' && outcome !== 'STALE_TOKEN') throw new Error(`the holder's fenced ${where} write failed: ${outcome}`);
      }
      await next.release().catch(() => {});
      return { injected, heldAfterResume: report.held, tokenRegression: next.token <= old, fencingOff, fencingOn };
    } finally {
      await close();
    }
  } catch (error) {
    // What the holder said on its way out is the only clue to why it went.
    const said = holder.stderr().trim().split('\n').slice(-3).join(' | ');
    throw said === '' ? error : new Error(`${(error as Error).message} (holder's stderr: ${said})`, { cause: error });
  } finally {
    holder.send('exit');
    await within(holder.exited, 30_000, 'the holder to exit').catch(() => holder.stop());
  }
}

/** `trials` paused holders of `sut`, `concurrency` at a time; a trial that throws is run again (at most `trials` extra runs). */
export async function runPaused(sut: SourceUnderTest, deployment: string, trials: number, concurrency: number, resources: Resources, log: (line: string) => void): Promise<PausedScenario> {
  const done: PausedTrial[] = [];
  const errors: string[] = [];
  const worker = async (): Promise<void> => {
    while (done.length < trials && errors.length <= trials) {
      // Claimed before the await: concurrent workers never run more than `trials` successful trials between them.
      const claimed = done.length + running;
      if (claimed >= trials) return;
      running++;
      try {
        done.push(await pausedTrial(sut, resources));
      } catch (error) {
        errors.push((error as Error).message.split('\n')[0] ?? String(error));
        log(`  paused ${sut.kind}: a trial failed (run again): ${errors.at(-1)}`);
      } finally {
        running--;
      }
    }
  };
  let running = 0;
  await Promise.all(Array.from({ length: Math.min(concurrency, trials) }, worker));
  const count = (f: (t: PausedTrial) => boolean): number => done.filter(f).length;
  const per = (pick: (t: PausedTrial) => Written) => ({
    postgres: count((t) => pick(t).postgres),
    s3: count((t) => pick(t).s3),
    http: count((t) => pick(t).http),
  });
  return {
    fault: `holder SIGSTOPped past its ${sut.grantMs} ms grant, successor granted and written, holder SIGCONTed and writes with its old token`,
    deployment,
    grantMs: sut.grantMs,
    trials: done.length,
    injected: count((t) => t.injected),
    heldAfterResume: count((t) => t.heldAfterResume),
    tokenRegressions: count((t) => t.tokenRegression),
    fencingOff: per((t) => t.fencingOff),
    fencingOn: per((t) => t.fencingOn),
    errors,
  };
}
