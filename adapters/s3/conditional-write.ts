// The loop every fenced write runs, whatever the layout: read the key's
// fence, judge our token against it, PUT conditioned on the object being the
// one we judged, and settle races and unknown outcomes by reading again.
//
//   1. Read the fence: what this process wrote last (a cache), else a HEAD.
//   2. Judge: another layout, a lock the key is not bound to (./binding.ts), a
//      smaller token, (in place) a repeated body -> refused, nothing sent. An equal token passes (the same holder writes
//      many times); a larger one advances the fence.
//   3. PUT with If-Match: <ETag without quotes> (If-None-Match: * for a
//      missing key). S3 conditional writes:
//      https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html
//   4. 412 (or 409 ConditionalRequestConflict): someone wrote in between. A
//      5xx or a lost reply: an unknown outcome. Either way HEAD again: a read
//      showing our write id means ours landed (a retried PUT whose first try
//      went through, a 500 after the write); otherwise go back to 2, with
//      jittered backoff, at most maxAttempts PUTs.
//
// After an unknown outcome, a read-back that shows someone else's write means
// ours did not stick (it never landed, or it landed and was overwritten
// since): the call decides again, so it may end in StaleTokenError (the
// object has moved past our token; anything we wrote is superseded) or in a
// fresh attempt. UnknownOutcomeError is left for a read-back that itself
// fails, and for contention outlasting maxAttempts.
//
// SDK retries: the user's client may retry a PUT (a 5xx, a reset). A retried
// conditional PUT whose first try had landed answers 412 (the ETag moved, or
// the key now exists); that goes down the race path, and the read finds our
// write id. Nothing here changes the client's retry configuration.
import { setTimeout as sleep } from 'node:timers/promises';
import { debuglog } from 'node:util';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import type { PutObjectCommandInput, S3Client } from '@aws-sdk/client-s3';
import { StaleTokenError, UnknownOutcomeError } from '../../src/index.js';
import { publishRefused, publishUnknownOutcome } from '../../src/extend.js';
import type { FenceBinding, FencingToken, ResolvedFencing } from '../../src/index.js';
import { judgeBinding } from './binding.js';
import type { StoredFence } from './metadata.js';
import { backoffMs, checkMaxAttempts, describeError, isAbort, sendOptions, type ObjectLocation } from './requests.js';
import { addCondition, isConditionFailure, isMissingKey, isUnknownOutcome } from './wire.js';
import type { PutCondition } from './wire.js';

const debug = debuglog('fencekeeper');

export const DEFAULT_MAX_ATTEMPTS = 20;

/** Options of every fenced S3 write: an abort signal and how many conditional PUTs to try under contention. */
export interface FencedWriteOptions {
  /**
   * Cancels the wait between attempts and the requests in flight (AbortError).
   * An abort while a PUT is in flight leaves that PUT's outcome unknown; readFence tells.
   */
  readonly signal?: AbortSignal;
  /** Conditional PUTs tried before giving up under contention (default 20). */
  readonly maxAttempts?: number;
  /**
   * For tests and advanced use: awaited after the fence was read and judged,
   * right before each conditional PUT of the key (in the pointer layout: after
   * the data object was written, before the pointer moves). A test holds a
   * writer here to open the window a paused holder would have.
   */
  readonly beforePut?: () => Promise<void>;
}

/** One fenced write, as the loop drives it; each layout fills it in. */
/** One fenced write to one key, as fencedPutObject / fencedDeleteObject resolved it: what every layout's plan starts from. */
export interface FencedWrite {
  readonly resource: string;
  readonly location: ObjectLocation;
  readonly token: FencingToken;
  /** The token and, for a sequencer, its lock: judged against the key's binding (./binding.ts). */
  readonly fencing: ResolvedFencing;
  /** The binding this write makes (the `bind` option), or null. */
  readonly bind: FenceBinding | null;
  readonly signal: AbortSignal | undefined;
}

type Planned = Pick<FencedWrite, 'resource' | 'token' | 'fencing' | 'bind'>;

/** What a plan keeps of its write: the key's name, the token and lock it is judged with, the binding it makes. */
export function planned(write: FencedWrite): Planned {
  return { resource: write.resource, token: write.token, fencing: write.fencing, bind: write.bind };
}

export interface WritePlan extends Planned {
  /** The key as this process last wrote it (a cache entry), or undefined: read it first. */
  readonly believed: StoredFence | null | undefined;
  read(): Promise<StoredFence | null>;
  /** Whether the object read back is this call's write. */
  isOurs(fence: StoredFence): boolean;
  /** Throws when this object is kept in another layout (checked before the token). */
  checkLayout(fence: StoredFence | null): void;
  /** Throws when the write must not go ahead for another reason (checked after the token). */
  checkWrite(fence: StoredFence | null): void;
  /**
   * The PUT to send, conditioned on `fence` and carrying `binding` (the pointer
   * layout writes its data object first); null when preparing showed that the
   * key has moved on since `fence` was read (the collector removed the data
   * object just written for it): the loop reads the key again and judges anew.
   */
  prepare(fence: StoredFence | null, binding: FenceBinding | null): Promise<PutObjectCommandInput | null>;
  /** The write landed: the key's new ETag, the object read back when the read showed it, and the binding it carries. */
  landed(etag: string | undefined, readBack: StoredFence | null, binding: FenceBinding | null): void;
  /** What this process believed about the key is wrong or unknown now. */
  forget(): void;
  /** The call failed; `refused` is true when none of its PUTs landed or can land later. */
  abandon(refused: boolean): Promise<void>;
}

/** Run the plan; resolves with the key's ETag after our write (as S3 returned it). */
export async function conditionalWrite(client: S3Client, plan: WritePlan, options: FencedWriteOptions): Promise<string> {
  const maxAttempts = checkMaxAttempts(options.maxAttempts, DEFAULT_MAX_ATTEMPTS);
  let refused = true; // no PUT of ours landed, or can land later
  try {
    return await run(client, plan, options, maxAttempts, () => { refused = false; });
  } catch (error) {
    await plan.abandon(refused);
    throw error;
  }
}

async function run(
  client: S3Client,
  plan: WritePlan,
  options: FencedWriteOptions,
  maxAttempts: number,
  mayHaveLanded: () => void,
): Promise<string> {
  const { resource, token } = plan;
  const signal = options.signal;
  // undefined: read it. null: the key does not exist.
  let known: StoredFence | null | undefined = plan.believed;
  let unsettled: unknown; // the error of a PUT whose outcome we have not seen yet
  let attempts = 0;

  for (;;) {
    if (known === undefined) {
      let fence: StoredFence | null;
      try {
        fence = await plan.read();
      } catch (error) {
        if (unsettled === undefined) throw error;
        publishUnknownOutcome(resource, token, 'unresolved', attempts);
        throw new UnknownOutcomeError(
          `${resource}: a conditional PUT with token ${token} may or may not have landed (${describeError(unsettled)}), and reading the object back failed (${describeError(error)})`,
          { cause: error },
        );
      }
      if (attempts > 0 && fence !== null && plan.isOurs(fence)) {
        debug('s3 %s: our write found after %d attempt(s)', resource, attempts);
        if (unsettled !== undefined) publishUnknownOutcome(resource, token, 'landed', attempts);
        plan.landed(fence.etag, fence, fence.binding);
        return fence.etag;
      }
      if (unsettled !== undefined) publishUnknownOutcome(resource, token, 'superseded', attempts);
      known = fence;
      unsettled = undefined; // the object is not ours: whatever we sent did not stick
    }

    plan.checkLayout(known);
    // The lock before the number: on a bound key, another lock's token is no token at all.
    const binding = judgeBinding(resource, known?.binding ?? null, plan.fencing, plan.bind);
    if (known !== null && known.token !== null && token < known.token) {
      const refused = new StaleTokenError(resource, token, known.token);
      publishRefused('s3', refused);
      throw refused;
    }
    plan.checkWrite(known);
    if (attempts >= maxAttempts) {
      throw new UnknownOutcomeError(
        `${resource}: gave up after ${attempts} attempts with token ${token}: each lost to a concurrent write (or its outcome was lost, and the object then was not ours; or, in the pointer layout, the collector removed its data object before the pointer could name it)`,
      );
    }

    const input = await plan.prepare(known, binding);
    if (input === null) {
      // Counted as an attempt, so a collector that keeps outrunning us cannot keep us here forever.
      attempts += 1;
      debug('s3 %s: the key moved on while preparing (attempt %d), reading again', resource, attempts);
      known = undefined;
      continue;
    }
    if (options.beforePut !== undefined) await options.beforePut();
    signal?.throwIfAborted();
    const condition: PutCondition = known === null ? { ifNoneMatch: '*' } : { ifMatch: known.etag };
    const command = new PutObjectCommand(input);
    const wire = addCondition(command, condition);
    attempts += 1;
    try {
      const output = await client.send(command, sendOptions(signal));
      plan.landed(output.ETag, null, binding);
      return output.ETag ?? '';
    } catch (error) {
      plan.forget();
      if (!wire.definitelyRefused()) mayHaveLanded();
      if (isConditionFailure(error) || ('ifMatch' in condition && isMissingKey(error))) {
        // (AWS answers If-Match on a key deleted since our read with 404 NoSuchKey; RGW with 412.)
        debug('s3 %s: condition %o failed (attempt %d), reading again', resource, condition, attempts);
      } else if (wire.sent() && isUnknownOutcome(error) && !isAbort(error)) {
        debug('s3 %s: unknown outcome (attempt %d): %s', resource, attempts, describeError(error));
        unsettled = error;
      } else {
        throw error;
      }
      known = undefined;
      await sleep(backoffMs(attempts), undefined, signal === undefined ? undefined : { signal });
    }
  }
}
