// The checker of the fault-injection run: a pure function of a
// recorded history. It knows nothing about processes or servers, so a unit
// test can hand it a history with a violation and see it reported
// (checker.test.ts).
//
// What it is given, per resource, is the resource's own apply order:
//   postgres  rows of a history table inserted inside withFence's transaction.
//             withFence holds the fence row's lock from the fence advance to
//             COMMIT, so two fenced transactions on one resource never overlap
//             and the bigserial order of their history rows is commit order.
//   http      the service's in-memory log, appended inside the fenced handler.
//             fencing() holds the resource's fence from admission until the
//             response has finished, so append order is admission order.
//   s3        a chain of conditional PUTs (see reconstructS3Chain): RGW 16
//             ignores If-Match/If-None-Match on versioned buckets, so object
//             versions cannot be listed; instead every body carries its write
//             id (so every write has its own ETag, the MD5 of its body), each
//             worker records the precondition header of every PUT it put on
//             the wire, and the chain is walked back from the final object: a
//             PUT with If-Match: E can only land while the object is the one
//             whose ETag is E, so the predecessor of every landed write is
//             the write applied right before it. An acknowledged write that is
//             not on the chain from the final object was lost (overwritten by
//             a write that never saw it): that is a violation.
//
// Properties, per resource (checked by fencekeeper/testing's checkHistory,
// src/testing/history.ts, the same check users run on their own resources):
//   1. order      tokens never decrease along the apply order
//   2. real time  a write acknowledged with token n was not invoked after a
//                 write with a larger token had been acknowledged
//   3. durability every acknowledged write is in the apply order; the final
//                 state is the last applied write (and carries the largest token)
//   4. no effect  a refused (stale) or failed write appears nowhere
// Apart from the resources, the lock's own history (every grant, with its
// token) is checked for what every source promises and the resources rely
// on: a grant whose acquire began after another grant was made has a larger
// token. A source that breaks it (a single Redis whose failover lost the
// last INCRs of its counter) is reported as a finding of its own, token
// regressions, beside the resources' verdict: the resources must still show
// no violation while the source's tokens were monotonic, and with fencing
// they refuse what a regressed token would have let through.
// The run as a whole must prove something: at least one fault injected
// and at least one stale write refused, else the check fails; every fault
// recorded must show that it took effect (a cut names the connections it
// reset, its victim noticed it), and every fault the run promised must be
// there.

import { checkHistory as checkResourceHistory, type HistoryViolationKind } from '../../src/testing/history.js';

export const RESOURCES = ['postgres', 's3', 'http'] as const;
export type Resource = (typeof RESOURCES)[number];

/** ok: acknowledged · refused: stale token, refused by the resource · failed: known not applied · unknown: may or may not have applied. */
export type Outcome = 'ok' | 'refused' | 'failed' | 'unknown';

/** One PUT on the wire, as the worker's S3 client saw it. */
export interface S3Attempt {
  /** The precondition header sent: If-Match's ETag (unquoted), '*' for If-None-Match, null for none. */
  readonly precondition: string | null;
  /** HTTP status, or null when no reply arrived (reset, timeout): outcome unknown. */
  readonly status: number | null;
}

export interface WriteRecord {
  /** Unique per write, stored in the resource with the data. */
  readonly id: string;
  readonly worker: number;
  readonly resource: Resource;
  readonly token: bigint;
  /** ms since the epoch (performance.timeOrigin + performance.now() in the worker). */
  readonly invokedAt: number;
  /** null: the worker never reported the end (killed, or still paused at the end). */
  readonly completedAt: number | null;
  readonly outcome: Outcome;
  readonly detail?: string;
  /** s3 only: the ETag of this write's body (unquoted MD5) and the PUTs that carried it. */
  readonly s3?: { readonly etag: string; readonly attempts: readonly S3Attempt[] };
}

/** One entry of a resource's apply order. */
export interface AppliedWrite {
  readonly id: string;
  readonly token: bigint;
}

export interface S3FinalObject {
  /** Unquoted ETag of the object as HEAD returns it. */
  readonly etag: string;
  /** The write-id metadata the test put in the body and the adapter in its metadata. */
  readonly writeId: string;
  readonly token: bigint | null;
}

export interface ResourceEvidence {
  /** postgres, http: the apply order as the resource recorded it. */
  readonly applied?: readonly AppliedWrite[];
  /** postgres, http: the final state; s3: the final object (null: no object). */
  readonly final: AppliedWrite | null;
  /** s3 only */
  readonly s3Final?: S3FinalObject | null;
  /** The resource's high-water mark at the end (fencekeeper_fences, the FenceStore), where it can be read. */
  readonly fence?: bigint | null;
}

/**
 * pause, cut, partition: of a worker; resource-cut: of one write's connection;
 * kill-leader (ZooKeeper, etcd), failover (Redis primary to replica),
 * node-restart, node-pause (a Redlock node): of the source's servers.
 */
export type FaultKind = 'pause' | 'kill-leader' | 'cut' | 'partition' | 'resource-cut' | 'failover' | 'node-restart' | 'node-pause';

/**
 * A fault the nemesis injected, with what shows that it happened. The harness
 * records a fault only once it has taken effect; the checker still refuses a
 * cut without the connections it reset or one its victim never noticed.
 */
export interface FaultRecord {
  readonly kind: FaultKind;
  /** The form of the kind where there are several (a failover with the replica held back). */
  readonly variant?: string;
  readonly target: string;
  readonly at: number;
  readonly detail?: string;
  /** pause: the lock token the worker had just been granted, when the pause hit a fresh holder. */
  readonly token?: bigint;
  /** cut, resource-cut: how many open connections the reset tore down. */
  readonly connections?: number;
  /** resource-cut: the resource, and the write that was in flight through the held connections. */
  readonly resource?: Resource;
  readonly write?: string;
  /**
   * What the victim reported afterwards: pause, the process was seen stopped
   * (state T); cut, its ZooKeeper client suspended; resource-cut, the held
   * write ended (with any outcome) after the reset.
   */
  readonly noticed?: boolean;
}

/** A fault the run promised: at least one of this kind (of a fresh holder, through this resource) must be recorded. */
export interface RequiredFault {
  readonly kind: FaultKind;
  /** Only a fault of this variant counts. */
  readonly variant?: string;
  /** How the report names it, where the kind alone does not say. */
  readonly name?: string;
  readonly resource?: Resource;
  /** pause only: the pause must have hit a worker right after its grant. */
  readonly freshHolder?: boolean;
}

export interface CycleCounts {
  readonly invoked: number;
  readonly completed: number;
  readonly acquireFailed: number;
  readonly unfinished: number;
}

/** One grant of the lock, as the worker that got it reported it. */
export interface GrantRecord {
  readonly worker: number;
  readonly cycle: string;
  readonly token: bigint;
  /** When the worker began the acquire (ms since the epoch, as WriteRecord's). */
  readonly invokedAt: number;
  /** When the grant came back to it. */
  readonly grantedAt: number;
}

/** A grant whose token is not above that of a grant made before its acquire began. */
export interface TokenRegression {
  readonly grant: GrantRecord;
  /** The earlier grant with the largest token. */
  readonly earlier: GrantRecord;
}

export interface History {
  readonly writes: readonly WriteRecord[];
  /** Every grant of the run; absent in histories without the lock's side. */
  readonly grants?: readonly GrantRecord[];
  readonly resources: Readonly<Record<Resource, ResourceEvidence>>;
  readonly faults: readonly FaultRecord[];
  readonly cycles?: CycleCounts;
  /** The faults the run promised; each missing one makes the run prove nothing. */
  readonly required?: readonly RequiredFault[];
  /** Why the nemesis could not inject a promised fault, one line each. */
  readonly missed?: readonly string[];
}

/** The per-resource checks' kinds, and the S3 chain's own. */
export type ViolationKind = HistoryViolationKind | 's3-chain';

export interface Violation {
  readonly resource: Resource;
  readonly kind: ViolationKind;
  readonly message: string;
}

export interface ResourceFigures {
  readonly invoked: number;
  readonly ok: number;
  readonly refused: number;
  readonly failed: number;
  readonly unknown: number;
  readonly applied: number;
  readonly finalToken: bigint | null;
  readonly fence: bigint | null | undefined;
}

export interface CheckResult {
  /** No violation, and the run proved something (a fault, a refused stale write). */
  readonly valid: boolean;
  readonly violations: readonly Violation[];
  /** Why a violation-free run still proves nothing (no fault, no refused stale write). */
  readonly vacuous: readonly string[];
  readonly figures: Readonly<Record<Resource, ResourceFigures>>;
  readonly totals: { readonly invoked: number; readonly ok: number; readonly refused: number; readonly failed: number; readonly unknown: number };
  readonly faultsByKind: Readonly<Partial<Record<FaultKind, number>>>;
  /** resource-cut faults per resource. */
  readonly resourceCuts: Readonly<Partial<Record<Resource, number>>>;
  /** s3: the apply order reconstructed from the chain of conditional PUTs. */
  readonly s3Chain: readonly AppliedWrite[];
  /**
   * The source's own finding, kept out of `valid` (which is the resources'
   * verdict and the run's proof): grants whose token did not rise. Empty:
   * the source's tokens were monotonic over the run.
   */
  readonly tokenRegressions: readonly TokenRegression[];
}

/**
 * The grants that broke token order: B is after A in real time when B's
 * acquire began after A's grant had come back, and then B's token must be
 * larger. Grants that overlap in time are not compared (nothing orders them
 * from outside), so every regression reported is a real one.
 */
export function findTokenRegressions(grants: readonly GrantRecord[]): TokenRegression[] {
  const byGrant = [...grants].sort((a, b) => a.grantedAt - b.grantedAt);
  const byInvoke = [...grants].sort((a, b) => a.invokedAt - b.invokedAt);
  const regressions: TokenRegression[] = [];
  let best: GrantRecord | null = null;
  let i = 0;
  for (const grant of byInvoke) {
    while (i < byGrant.length && (byGrant[i] as GrantRecord).grantedAt < grant.invokedAt) {
      const earlier = byGrant[i] as GrantRecord;
      if (best === null || earlier.token > best.token) best = earlier;
      i++;
    }
    if (best !== null && grant.token <= best.token) regressions.push({ grant, earlier: best });
  }
  return regressions.sort((a, b) => a.grant.grantedAt - b.grant.grantedAt);
}

/**
 * Walk the chain of conditional PUTs back from the final object.
 * Each landed write names its predecessor by the If-Match ETag of the attempt
 * that landed (a 2xx, or one whose reply was lost or was a 5xx: those may have
 * landed; the adapter then read the object back). If-None-Match: * starts the
 * chain. A write may land twice (a lost reply, then a new decision after the
 * object moved): each of its landed attempts is used at most once.
 */
export function reconstructS3Chain(
  writes: readonly WriteRecord[],
  final: S3FinalObject | null,
): { readonly chain: readonly AppliedWrite[]; readonly problems: readonly string[] } {
  const problems: string[] = [];
  if (final === null) return { chain: [], problems };
  const byEtag = new Map<string, WriteRecord>();
  for (const w of writes) {
    if (w.resource !== 's3' || w.s3 === undefined) continue;
    const other = byEtag.get(w.s3.etag);
    if (other !== undefined) problems.push(`writes ${other.id} and ${w.id} have the same ETag ${w.s3.etag}: the chain cannot tell them apart`);
    byEtag.set(w.s3.etag, w);
  }
  const used = new Map<string, Set<number>>();
  const reversed: AppliedWrite[] = [];
  let etag: string = final.etag;
  for (let steps = 0; ; steps++) {
    const write = byEtag.get(etag);
    if (write === undefined || write.s3 === undefined) {
      problems.push(`the object with ETag ${etag} (${steps === 0 ? 'the final object' : `replaced by ${reversed[reversed.length - 1]?.id ?? '?'}`}) was written by no recorded write`);
      break;
    }
    if (steps === 0 && write.id !== final.writeId) {
      problems.push(`the final object's write id ${final.writeId} does not match the write ${write.id} whose body has its ETag`);
    }
    if (steps > 4 * writes.length + 4) {
      problems.push('the chain of preconditions loops');
      break;
    }
    reversed.push({ id: write.id, token: write.token });
    const taken = used.get(write.id) ?? new Set<number>();
    used.set(write.id, taken);
    // Landed candidates: 2xx first (certain), then unknown outcomes.
    const candidates = write.s3.attempts
      .map((a, index) => ({ a, index }))
      .filter(({ a, index }) => !taken.has(index) && (a.status === null || (a.status >= 200 && a.status < 300) || a.status >= 500));
    candidates.sort((x, y) => rank(x.a) - rank(y.a));
    const pick = candidates.find(({ a }) => a.precondition === '*' || (a.precondition !== null && a.precondition !== write.s3?.etag && byEtag.has(a.precondition)))
      ?? candidates[0];
    if (pick === undefined) {
      problems.push(`write ${write.id} is on the chain but none of its PUTs could have landed (${describeAttempts(write.s3.attempts)})`);
      break;
    }
    taken.add(pick.index);
    const precondition = pick.a.precondition;
    if (precondition === '*') break;
    if (precondition === null) {
      problems.push(`write ${write.id} landed through a PUT without a precondition: the writes before it cannot be ordered`);
      break;
    }
    etag = precondition;
  }
  return { chain: reversed.reverse(), problems };
}

function rank(a: S3Attempt): number {
  return a.status !== null && a.status >= 200 && a.status < 300 ? 0 : 1;
}

function describeAttempts(attempts: readonly S3Attempt[]): string {
  return attempts.map((a) => `${a.precondition ?? 'unconditional'} -> ${a.status ?? 'no reply'}`).join(', ') || 'no PUT sent';
}

export function checkHistory(history: History): CheckResult {
  const violations: Violation[] = [];
  const figures = {} as Record<Resource, ResourceFigures>;
  let s3Chain: readonly AppliedWrite[] = [];

  for (const resource of RESOURCES) {
    const writes = history.writes.filter((w) => w.resource === resource);
    const evidence = history.resources[resource];
    const add = (kind: ViolationKind, message: string): void => {
      violations.push({ resource, kind, message });
    };
    let applied: readonly AppliedWrite[];
    let final: AppliedWrite | null;
    if (resource === 's3') {
      const s3Final = evidence.s3Final ?? null;
      const { chain, problems } = reconstructS3Chain(writes, s3Final);
      for (const p of problems) add('s3-chain', p);
      applied = chain;
      s3Chain = chain;
      final = s3Final === null ? null : { id: s3Final.writeId, token: s3Final.token ?? -1n };
      if (s3Final !== null && s3Final.token === null) add('final-state', 'the final object carries no fencing token');
    } else {
      applied = evidence.applied ?? [];
      final = evidence.final;
    }

    // Properties 1-4 per resource: the same check users get from fencekeeper/testing.
    const check = checkResourceHistory({
      writes,
      applied,
      final,
      ...(evidence.fence !== undefined && { fence: evidence.fence }),
      // A conditional PUT retried after a lost reply may land twice; one call is one transaction/request elsewhere.
      allowRepeats: resource === 's3',
      resource,
    });
    for (const v of check.violations) add(v.kind, v.message);
    const okWrites = writes.filter((w) => w.outcome === 'ok');

    figures[resource] = {
      invoked: writes.length,
      ok: okWrites.length,
      refused: writes.filter((w) => w.outcome === 'refused').length,
      failed: writes.filter((w) => w.outcome === 'failed').length,
      unknown: writes.filter((w) => w.outcome === 'unknown').length,
      applied: applied.length,
      finalToken: final?.token ?? null,
      fence: evidence.fence,
    };
  }

  const totals = { invoked: 0, ok: 0, refused: 0, failed: 0, unknown: 0 };
  for (const f of Object.values(figures)) {
    totals.invoked += f.invoked;
    totals.ok += f.ok;
    totals.refused += f.refused;
    totals.failed += f.failed;
    totals.unknown += f.unknown;
  }
  const faultsByKind: Partial<Record<FaultKind, number>> = {};
  const resourceCuts: Partial<Record<Resource, number>> = {};
  for (const f of history.faults) {
    faultsByKind[f.kind] = (faultsByKind[f.kind] ?? 0) + 1;
    if (f.kind === 'resource-cut' && f.resource !== undefined) resourceCuts[f.resource] = (resourceCuts[f.resource] ?? 0) + 1;
  }

  const vacuous: string[] = [];
  if (history.faults.length === 0) vacuous.push('no fault was injected');
  if (totals.refused === 0) vacuous.push('no stale write was refused: the run never put a stale holder in front of a resource');
  vacuous.push(...checkFaults(history));
  const tokenRegressions = findTokenRegressions(history.grants ?? []);
  return { valid: violations.length === 0 && vacuous.length === 0, violations, vacuous, figures, totals, faultsByKind, resourceCuts, s3Chain, tokenRegressions };
}

function describeRequired(r: RequiredFault): string {
  if (r.name !== undefined) return r.name;
  if (r.kind === 'pause' && r.freshHolder === true) return 'a pause of a fresh lock holder';
  if (r.kind === 'resource-cut') return `a held-then-reset ${r.resource ?? 'resource'} write`;
  return `a ${r.kind}`;
}

/** A recorded fault must show that it happened, and every promised fault must be there. */
function checkFaults(history: History): string[] {
  const problems: string[] = [];
  const writesById = new Map(history.writes.map((w) => [w.id, w]));
  for (const f of history.faults) {
    const what = `the ${f.kind} of ${f.target} at ${f.at}`;
    if (f.kind === 'cut' || f.kind === 'resource-cut') {
      if (f.connections === undefined || f.connections < 1) problems.push(`${what} reset ${f.connections ?? 'an unknown number of'} connections: it cut nothing`);
    }
    if (f.kind === 'resource-cut') {
      const write = f.write === undefined ? undefined : writesById.get(f.write);
      if (f.resource === undefined || write === undefined || write.resource !== f.resource) {
        problems.push(`${what} names no ${f.resource ?? ''} write of the history (${f.write ?? 'none'}) that it held`);
      }
    }
    if ((f.kind === 'pause' || f.kind === 'cut' || f.kind === 'resource-cut') && f.noticed !== true) {
      problems.push(`${what} was never noticed by its victim (${f.noticed === undefined ? 'not checked' : 'no sign of it'})`);
    }
  }
  for (const r of history.required ?? []) {
    const count = history.faults.filter(
      (f) =>
        f.kind === r.kind &&
        (r.variant === undefined || f.variant === r.variant) &&
        (r.resource === undefined || f.resource === r.resource) &&
        (r.freshHolder !== true || f.token !== undefined),
    ).length;
    if (count === 0) problems.push(`the run promised ${describeRequired(r)} and injected none`);
  }
  for (const m of history.missed ?? []) problems.push(`the nemesis could not inject ${m}`);
  return problems;
}

/** The report printed by the test and the script. */
export function formatReport(result: CheckResult, history: History): string[] {
  const lines: string[] = [];
  const c = history.cycles;
  if (c !== undefined) {
    lines.push(`lock cycles: ${c.invoked} invoked, ${c.completed} completed, ${c.acquireFailed} acquire failed, ${c.unfinished} unfinished`);
  }
  const t = result.totals;
  lines.push(`writes: ${t.invoked} invoked, ${t.ok} ok, ${t.refused} refused-stale, ${t.failed} failed, ${t.unknown} unknown`);
  for (const r of RESOURCES) {
    const f = result.figures[r];
    lines.push(
      `  ${r.padEnd(8)} ${String(f.invoked).padStart(4)} invoked, ${String(f.ok).padStart(4)} ok, ${String(f.refused).padStart(3)} refused-stale, ${f.failed} failed, ${f.unknown} unknown; ${f.applied} applied, final token ${f.finalToken ?? '-'}${f.fence === undefined ? '' : `, fence ${f.fence ?? '-'}`}`,
    );
  }
  const puts = { ok: 0, precondition: 0, serverError: 0, noReply: 0, other: 0 };
  for (const w of history.writes) {
    for (const a of w.s3?.attempts ?? []) {
      if (a.status === null) puts.noReply += 1;
      else if (a.status >= 200 && a.status < 300) puts.ok += 1;
      else if (a.status === 412) puts.precondition += 1;
      else if (a.status >= 500) puts.serverError += 1;
      else puts.other += 1;
    }
  }
  lines.push(`  s3 conditional PUTs: ${puts.ok} 2xx, ${puts.precondition} 412, ${puts.serverError} 5xx, ${puts.noReply} without a reply, ${puts.other} other; chain of ${result.s3Chain.length} from the final object`);
  const cuts = Object.entries(result.resourceCuts).map(([r, n]) => `${r} ${n}`).join(', ');
  const kinds = Object.entries(result.faultsByKind)
    .map(([k, n]) => `${k} ${n}${k === 'resource-cut' && cuts !== '' ? ` [${cuts}]` : ''}`)
    .join(', ');
  lines.push(`faults injected: ${history.faults.length}${kinds === '' ? '' : ` (${kinds})`}`);
  lines.push(`stale writes refused: ${t.refused}`);
  if (history.grants !== undefined) {
    const regressions = result.tokenRegressions;
    lines.push(`lock grants: ${history.grants.length}; token regressions: ${regressions.length}`);
    for (const r of regressions.slice(0, 10)) {
      const { grant: g, earlier: e } = r;
      lines.push(`  TOKEN REGRESSION ${g.cycle} was granted token ${g.token}, not above ${e.cycle}'s ${e.token}, granted ${Math.round(g.invokedAt - e.grantedAt)} ms before ${g.cycle}'s acquire began`);
    }
    if (regressions.length > 10) lines.push(`  ... and ${regressions.length - 10} more`);
    lines.push(
      regressions.length === 0
        ? "TOKENS: monotonic (every grant's token above every grant made before its acquire began)"
        : `TOKENS: NOT monotonic: ${regressions.length} of ${history.grants.length} grants repeated or went below a token already handed out (a finding about the source; the resources' verdict is below)`,
    );
  }
  lines.push(`violations: ${result.violations.length}`);
  for (const v of result.violations) lines.push(`  VIOLATION [${v.resource}/${v.kind}] ${v.message}`);
  for (const v of result.vacuous) lines.push(`  PROVES NOTHING: ${v}`);
  lines.push(result.valid ? 'RESULT: valid' : 'RESULT: INVALID');
  return lines;
}
