// What goes on the wire for a conditional PUT, and how S3's answers are read.
import { createHash } from 'node:crypto';
import type { PutObjectCommand } from '@aws-sdk/client-s3';

/** The precondition of one PUT: the object must still be the one we read, or must not exist. */
export type PutCondition = { readonly ifMatch: string } | { readonly ifNoneMatch: '*' };

/** An ETag as S3 returns it is a quoted string; If-Match wants it without the quotes on RGW. */
export function unquoteEtag(etag: string): string {
  const weak = etag.startsWith('W/') ? etag.slice(2) : etag;
  return weak.length >= 2 && weak.startsWith('"') && weak.endsWith('"') ? weak.slice(1, -1) : weak;
}

/**
 * Put the precondition header on this one command, in the build step (before
 * signing, so it is signed; after serialization, so nothing overwrites it).
 *
 * Why not the IfMatch/IfNoneMatch input fields: they were added to
 * PutObjectCommandInput late in v3 (2024), and an older SDK within our peer range
 * drops an unknown field without a word, which would turn a fenced write into an
 * unconditional one. The header set here reaches the server with any v3 release,
 * verbatim (RGW 16 answers 412 to an If-Match whose ETag is quoted; AWS accepts
 * both forms). The middleware is added to the command's own stack, so the
 * client's stack, and the user's middleware on it, are untouched and still run.
 */
export function addCondition(command: PutObjectCommand, condition: PutCondition): SendRecord {
  const [name, value] = 'ifMatch' in condition
    ? ['if-match', unquoteEtag(condition.ifMatch)]
    : ['if-none-match', condition.ifNoneMatch];
  command.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { headers?: Record<string, string> };
      if (request.headers !== undefined) request.headers[name] = value;
      return next(args);
    },
    { step: 'build', name: 'fencekeeperPutCondition', priority: 'low' },
  );
  return recordSends(command);
}

/** What went on the wire for one command: one entry per send (the SDK may retry), its HTTP status or null for none. */
export interface SendRecord {
  readonly answers: readonly (number | null)[];
  sent(): boolean;
  /**
   * True only when every send was answered with a 4xx (the condition failed,
   * or the request was refused): then this command's write did not land, and
   * cannot land later. A 5xx may follow a write that was applied, and a send
   * without an answer (a reset, a timeout) may still be applied by the server
   * after we gave up on it.
   */
  definitelyRefused(): boolean;
}

/**
 * Innermost in the deserialize step, i.e. right before the HTTP handler, so it
 * sees every send, the SDK's retries included. An error from a request that
 * never got this far (credentials, a bad endpoint, an abort before sending) is
 * a definite "not written", not an unknown outcome.
 */
export function recordSends(command: PutObjectCommand): SendRecord {
  const answers: (number | null)[] = [];
  command.middlewareStack.add(
    (next) => async (args) => {
      try {
        const out = await next(args);
        answers.push((out.response as { statusCode?: number }).statusCode ?? null);
        return out;
      } catch (error) {
        answers.push(null);
        throw error;
      }
    },
    { step: 'deserialize', name: 'fencekeeperPutSent', priority: 'low' },
  );
  return {
    answers,
    sent: () => answers.length > 0,
    definitelyRefused: () => answers.every((status) => status !== null && status >= 400 && status < 500),
  };
}

/**
 * The ETag S3 gives a single-part, unencrypted (or SSE-S3) PUT of this body:
 * the hex MD5 of its bytes.
 */
export function md5Etag(body: string | Uint8Array | undefined): string {
  return createHash('md5').update(body ?? '').digest('hex');
}

interface S3ErrorShape {
  readonly name?: unknown;
  readonly Code?: unknown;
  readonly $metadata?: { readonly httpStatusCode?: number };
}

function shape(error: unknown): S3ErrorShape {
  return typeof error === 'object' && error !== null ? (error as S3ErrorShape) : {};
}

export function httpStatus(error: unknown): number | undefined {
  return shape(error).$metadata?.httpStatusCode;
}

/**
 * The precondition failed: someone wrote the key between our read and our PUT
 * (412), or a concurrent conditional write on the same key was in progress (AWS's
 * 409 ConditionalRequestConflict). Either way nothing of ours landed in this
 * attempt, except after an SDK retry of a PUT that did land: the read that
 * follows checks our write id for that case.
 */
export function isConditionFailure(error: unknown): boolean {
  const e = shape(error);
  if (e.$metadata?.httpStatusCode === 412) return true;
  return e.$metadata?.httpStatusCode === 409 && (e.name === 'ConditionalRequestConflict' || e.Code === 'ConditionalRequestConflict');
}

/**
 * The PUT may or may not have been applied: a 5xx (RGW answers 500 to some of
 * many racing If-Match PUTs), or no HTTP answer at all (connection reset,
 * timeout, abort after sending). Any other 4xx is a definite refusal.
 */
export function isUnknownOutcome(error: unknown): boolean {
  const status = httpStatus(error);
  return status === undefined || status >= 500;
}

export function isNotFound(error: unknown): boolean {
  const e = shape(error);
  return e.$metadata?.httpStatusCode === 404 || e.name === 'NotFound' || e.name === 'NoSuchKey';
}

/** 404 for the key itself, not for the bucket. */
export function isMissingKey(error: unknown): boolean {
  const e = shape(error);
  return e.$metadata?.httpStatusCode === 404 && e.name !== 'NoSuchBucket' && e.Code !== 'NoSuchBucket';
}
