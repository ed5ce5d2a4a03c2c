// Scenario 3, the paused holder, for every source of test/helpers/sources.ts
// (SOURCES: the sources of the paused-holder test, with its grant lifetimes),
// by the paused-holder test's own steps (pauseSourceHolder): a holder process
// (test/fixtures/source-holder.mjs) takes the lock, is SIGSTOPped, the source
// ends its grant (a session expires, a TTL runs out) and the next holder is
// granted the lock and writes; the holder is resumed with SIGCONT and writes
// with its old token, to the fenced resources and to the plain ones. Counted
// per resource: the stale write accepted, fencing off (the plain resource
// keeps the stale holder's value over the newer one's) and fencing on (the
// fence let it through). Trials run concurrently: each has its own lock name
// and resources, and most of a trial is waiting for a grant to end.
//
// A holder that never got its grant is no trial: on a loaded machine a
// holder process with a 2 s grant can be starved past it while it acquires
// (etcd: "no keepalive of the etcd lease was acknowledged within its 2000 ms
// TTL", the holder exits 1 before it reports holding). Nothing the trial
// judges has happened yet, so that set-up is started again with a fresh
// holder and lock name (SETUP_ATTEMPTS, each logged) and not counted as a
// failed trial; a trial whose holder held and then failed is counted and run
// again as before. Each such set-up doubles the scenario's grant lifetime for
// the holders started after it (up to MAX_GRANT_MS): at load 30 on 2 cores
// most etcd holders with a 2 s lease never got their grant, and retrying
// alone did not make 20 trials. The grant is only how long the stopped
// holder takes to lose the lock: every trial still pauses its holder past
// it, and the report prints the lifetime the trials ran with.
import type { HolderProcess } from '../../src/testing/index.js';
import { pauseSourceHolder } from '../helpers/paused-source-holder.js';
import { environmentServers } from '../helpers/server-env.js';
import type { SourceUnderTest } from '../helpers/sources.js';
import { uniqueLockName } from '../helpers/unique.js';
import { pausedMissing, type Missing } from './evidence.js';
import type { Resources, Written } from './resources.js';

export interface PausedTrial {
  /** What the evidence failed to show: empty when the holder was stopped (the kernel showed it so) when the successor was granted the lock. */
  readonly missing: Missing;
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

/** Holders started for one trial that never reported holding, before the trial fails. */
export const SETUP_ATTEMPTS = 8;
/** The most a paused scenario's grant lifetime is raised to. */
export const MAX_GRANT_MS = 16_000;

/** A scenario's grant lifetime, shared by its concurrent trials: raised when a holder could not get its grant in it. */
export interface Grant {
  ms: number;
}

/**
 * One paused-holder trial; its set-up (a holder that gets its grant) started
 * again, up to SETUP_ATTEMPTS holders, while the holder exits or is stopped
 * before it ever reported holding.
 */
export async function pausedTrial(sut: SourceUnderTest, resources: Resources, log: (line: string) => void = () => {}, grant: Grant = { ms: sut.grantMs }): Promise<PausedTrial> {
  for (let attempt = 1; ; attempt++) {
    const holders: HolderProcess[] = [];
    const grantMs = grant.ms;
    try {
      return await pausedAttempt({ ...sut, grantMs }, resources, holders);
    } catch (error) {
      const holder = holders[0];
      // Settled by now: pauseSourceHolder stops the holder before it rethrows.
      const everHeld = holder === undefined || (await holder.holding.then(() => true, () => false));
      if (everHeld || attempt >= SETUP_ATTEMPTS) throw error;
      await holder.exited;
      // Its stderr arrives after its 'exit' event, which is when the error's text was written.
      await new Promise((r) => setTimeout(r, 200));
      const said = holder.stderr().trim().split('\n').filter((l) => /Error|error/.test(l)).at(-1) ?? (error as Error).message.split('\n')[0];
      if (grant.ms === grantMs && grantMs < MAX_GRANT_MS) grant.ms = Math.min(grantMs * 2, MAX_GRANT_MS);
      log(`  paused ${sut.kind}: the holder never got its ${grantMs} ms grant, set-up started again (${attempt}/${SETUP_ATTEMPTS - 1}; grant now ${grant.ms} ms): ${said}`);
    }
  }
}

async function pausedAttempt(sut: SourceUnderTest, resources: Resources, holders: HolderProcess[]): Promise<PausedTrial> {
  const name = uniqueLockName(`cmp_paused_${sut.kind}`);
  const run = await pauseSourceHolder(sut, {
    lock: name,
    holders,
    env: {
      ...holderEnvironment(),
      FK_RESOURCE: `compare/${name}`,
      FK_BUCKET: resources.bucket,
      FK_URL: resources.fencedUrl(name),
      FK_UNFENCED_TABLE: resources.table,
      FK_UNFENCED_URL: resources.plainUrl(name),
    },
    async whileStopped(next) {
      await resources.writeFenced(name, next.token, 'successor');
      await resources.writePlain(name, next.token);
    },
  });
  const { report, oldToken } = run;
  if (report.token !== oldToken) throw new Error(`the holder wrote with ${report.token}, it reported holding ${oldToken}`);
  const outcomes = [['postgres', report.postgres], ['s3', report.s3], ['plain postgres', report.unfenced?.postgres], ['plain s3', report.unfenced?.s3]] as const;
  for (const [where, outcome] of outcomes) {
    if (outcome !== 'written' && outcome !== 'STALE_TOKEN') throw new Error(`the holder's ${where} write failed: ${String(outcome)}`);
  }
  return {
    missing: pausedMissing({ stoppedAtGrant: run.stoppedAtGrant }),
    heldAfterResume: report.held,
    tokenRegression: run.nextToken <= oldToken,
    // Fencing off: the plain resource keeps the stale holder's write over the newer one's.
    fencingOff: await resources.plainHolds(name, oldToken),
    fencingOn: { postgres: report.postgres === 'written', s3: report.s3 === 'written', http: report.http === 200 },
  };
}

export async function runPaused(sut: SourceUnderTest, deployment: string, trials: number, concurrency: number, resources: Resources, log: (line: string) => void): Promise<PausedScenario> {
  const done: PausedTrial[] = [];
  const errors: string[] = [];
  const grant: Grant = { ms: sut.grantMs };
  const worker = async (): Promise<void> => {
    while (done.length < trials && errors.length <= trials) {
      // Claimed before the await: concurrent workers never run more than `trials` successful trials between them.
      const claimed = done.length + running;
      if (claimed >= trials) return;
      running++;
      try {
        const t = await pausedTrial(sut, resources, log, grant);
        done.push(t);
        if (t.missing.length > 0) log(`  paused ${sut.kind}: a trial's fault was not shown by its evidence: ${t.missing.join('; ')}`);
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
    fault: `holder SIGSTOPped past its ${sut.grantMs} ms grant${grant.ms === sut.grantMs ? '' : ` (raised to ${grant.ms} ms: under this run's load holders could not get a ${sut.grantMs} ms grant)`}, successor granted and written, holder SIGCONTed and writes with its old token`,
    deployment,
    grantMs: grant.ms,
    trials: done.length,
    injected: count((t) => t.missing.length === 0),
    heldAfterResume: count((t) => t.heldAfterResume),
    tokenRegressions: count((t) => t.tokenRegression),
    fencingOff: per((t) => t.fencingOff),
    fencingOn: per((t) => t.fencingOn),
    errors,
  };
}
