// Opening a fenced transaction with as few round trips as the driver allows.
// On a pg client, one:
//
//   BEGIN; EXECUTE fencekeeper_fences_advance_<hash>(E'<resource>', <token>::int8, <lock>); SAVEPOINT fencekeeper_fenced
//
// as one simple-query message. PostgreSQL runs its statements in order and
// answers each (node-postgres hands back one result per statement), so the
// fence statement's answer is read from the second result (./advance.ts:
// no row for a token equal to the mark, the row for one it inserted or
// advanced, the unchanged row for a stale one). A simple-query message carries
// no parameters: the resource travels as an E'' literal (quoteLiteral) and the
// token as the digits of a validated bigint.
//
// The fence statement itself is prepared once per connection, with SQL
// PREPARE, on the first open a connection sees (with the backend's pid, which
// the store needs to cancel a statement and which a connection keeps for
// life): EXECUTE then skips parsing and planning the upsert on every
// admission. PREPARE is not transactional (a rollback keeps it), and the name
// carries a hash of the text, so a statement found under that name is this one.
//
// The common case, the same holder again with the token the mark already
// carries, opens with a cheaper statement: the probe (./advance.ts,
// OPEN_EQUAL), which only locks the row when it carries our token:
//
//   BEGIN; EXECUTE fencekeeper_fences_equal_<hash>(<the same arguments>); SAVEPOINT fencekeeper_fenced
//
// Whether to try it is a guess from this process's last admission of the
// resource (`lastAdmitted`): it is tried when that admitted this very token.
// One row back: admitted. No row (the mark moved, a binding refuses us, the
// isolation is not READ COMMITTED): one more message, `ROLLBACK; <the open
// above>`, and from there everything is as if the probe had never been sent.
// A wrong guess so costs a round trip and never a guarantee: the probe
// admits only what the upsert's equal path admits, holding the same row.
//
// A stale token (the unchanged row back, holding the row lock) costs one more
// message, ROLLBACK. A mismatched binding aborts the transaction (./advance.ts);
// its message rolls back and reads which binding refused us:
// `ROLLBACK; SELECT ...`. Success costs nothing beyond the message that
// replaced BEGIN.
//
// On a Kysely instance withFence holds one connection and opens the same way,
// with statements that answer by raising (see openFencedKyselyConnection); in
// a Kysely transaction (BEGIN already sent by Kysely) the advance and the
// savepoint go in one message (see openFencedKysely).
import { createHash } from 'node:crypto';
import { SequencerMismatchError, StaleTokenError, type FencingToken, type ResolvedFencing } from '../../../src/index.js';
import { checkInTransaction, checkOutcome, checkStatements, checksOnly } from './check.js';
import { rawQuery, sendKysely, sendPg, sqlState, type KyselyExecutor, type PgPoolClient, type PgQueryResult } from '../database.js';
import { CancelledWait } from './cancel.js';
import { OPEN_ADVANCE, OPEN_ADVANCE_OR_RAISE, OPEN_EQUAL, OPEN_EQUAL_OR_RAISE, advanceOrRaise, isProbeMiss, isRefusalError, outcomeOf } from './advance.js';
import { FENCE_STATE, bindingValues, refusal, refusalFrom, type Advanced } from './row.js';
import { OPEN_SAVEPOINT, rollback } from './transaction.js';
import { quoteLiteral, tokenLiteral } from '../identifiers.js';

const nameOf = (prefix: string, text: string): string => `${prefix}_${createHash('sha256').update(text).digest('hex').slice(0, 16)}`;
const ADVANCE_NAME = nameOf('fencekeeper_fences_advance', OPEN_ADVANCE);
const EQUAL_NAME = nameOf('fencekeeper_fences_equal', OPEN_EQUAL);
const PREPARES = [
  `PREPARE ${ADVANCE_NAME} (text, int8, text, text, text, text) AS ${OPEN_ADVANCE}`,
  `PREPARE ${EQUAL_NAME} (text, int8, text, text, text, text) AS ${OPEN_EQUAL}`,
];
const PID = 'SELECT pg_backend_pid() AS pid';

/** Connections on which PREPARE has run, with their backend's pid (pg.Pool hands out the same client object for a connection). */
const prepared = new WeakMap<PgPoolClient, number>();

/**
 * The token this process last admitted per resource: the guess that the mark
 * still carries it, so the probe is worth sending. A guess only (another
 * process, or the same names in another database, may have moved the mark),
 * so kept small: the oldest entry goes when it is full.
 */
const lastAdmitted = new Map<string, FencingToken>();
const LAST_ADMITTED_MAX = 4096;

/**
 * Connections on which the probe missed and the upsert then rewrote an equal
 * mark: not at READ COMMITTED (a session default of REPEATABLE READ or
 * SERIALIZABLE), where the probe can never hit. They open with the upsert
 * from then on.
 */
const probeMisses = new WeakSet<PgPoolClient>();

function remember(resource: string, token: FencingToken): void {
  if (lastAdmitted.get(resource) === token) return;
  lastAdmitted.delete(resource);
  lastAdmitted.set(resource, token);
  if (lastAdmitted.size > LAST_ADMITTED_MAX) lastAdmitted.delete(lastAdmitted.keys().next().value as string);
}

/** Sends a simple-query message and answers every statement's result. */
export type SendMessage = (text: string) => Promise<PgQueryResult[]>;

export type Opened =
  | { readonly ok: true; readonly advanced: Advanced }
  /** Not opened; the transaction was rolled back. `broken`: the client is unusable and must be destroyed. */
  | { readonly ok: false; readonly error: unknown; readonly broken: Error | undefined };

/**
 * BEGIN, advance the fence of `resource` to `token` and set the savepoint, in
 * one message on `client` (idle, outside a transaction); two when a probe
 * misses (see above). `send` carries each message (the store's makes it
 * cancellable while it waits for the row lock;
 * a CancelledWait it throws is passed through, the transaction left to the
 * caller, which destroys the client).
 * Every other failure, and a stale token, is answered with the transaction
 * already rolled back.
 */
export async function openFenced(client: PgPoolClient, resource: string, fencing: ResolvedFencing, send: SendMessage = sendOn(client)): Promise<Opened> {
  if (checksOnly(fencing)) return openChecked(client, resource, fencing, send);
  const resourceLiteral = quoteLiteral(resource);
  const args = `(${resourceLiteral}, ${tokenLiteral(fencing.token)}, ${bindingLiterals(fencing)})`;
  const open = `BEGIN; EXECUTE ${ADVANCE_NAME}${args}; ${OPEN_SAVEPOINT}`;
  for (let attempt = 1; ; attempt += 1) {
    let pid: number;
    try {
      pid = await prepare(client);
    } catch (error) {
      return { ok: false, error, broken: undefined }; // outside a transaction: nothing to roll back
    }
    const probing = lastAdmitted.get(resource) === fencing.token && !probeMisses.has(client);
    let answer: PgQueryResult | undefined;
    try {
      if (probing) {
        const probed = await send(`BEGIN; EXECUTE ${EQUAL_NAME}${args}; ${OPEN_SAVEPOINT}`);
        if (probed[1]?.rowCount === 1) return { ok: true, advanced: { previous: fencing.token, pid } };
        // Missed: roll the probe back and open as if it had never been sent.
        answer = (await send(`ROLLBACK; ${open}`))[2];
      } else {
        answer = (await send(open))[1];
      }
    } catch (error) {
      if (error instanceof CancelledWait) throw error;
      if (isRefusalError(error)) {
        lastAdmitted.delete(resource);
        return refuse(client, resource, resourceLiteral, fencing);
      }
      const broken = await rollback(client);
      // A statement is gone from this connection (DEALLOCATE ALL or DISCARD ALL ran on it): prepare them again, once.
      if (sqlState(error) === '26000' && broken === undefined && attempt === 1) {
        prepared.delete(client);
        continue;
      }
      return { ok: false, error, broken };
    }
    const outcome = outcomeOf(resource, fencing, answer?.rows[0] as Record<string, unknown> | undefined);
    if (outcome.ok) {
      // The mark was our token and the upsert rewrote the row: this connection is not at READ COMMITTED
      // (there an equal token comes back as no row; a probe that missed an equal mark there raced the
      // mark's advance to this token, whose commit its snapshot did not see yet).
      if (probing && answer?.rows[0] !== undefined && outcome.previous === fencing.token) probeMisses.add(client);
      remember(resource, fencing.token);
      return { ok: true, advanced: { previous: outcome.previous, pid } };
    }
    // Stale: the row came back unchanged with the mark that refused us, read under our lock.
    lastAdmitted.delete(resource);
    return { ok: false, error: outcome.stale, broken: await rollback(client) };
  }
}

/**
 * The check-only opening (./check.ts): BEGIN, the check and the savepoint in
 * one message; a refusal is answered with the transaction rolled back.
 */
async function openChecked(client: PgPoolClient, resource: string, fencing: ResolvedFencing, send: SendMessage): Promise<Opened> {
  let answers: PgQueryResult[];
  try {
    answers = await send(`BEGIN; ${checkStatements(resource)}; ${OPEN_SAVEPOINT}`);
  } catch (error) {
    if (error instanceof CancelledWait) throw error;
    return { ok: false, error, broken: await rollback(client) };
  }
  const outcome = checkOutcome(resource, fencing, answers[1], answers[2], answers[3]);
  if (outcome instanceof Error) return { ok: false, error: outcome, broken: await rollback(client) };
  return { ok: true, advanced: outcome };
}

/** PREPARE the fence statement on `client` unless done; answers the backend's pid. */
async function prepare(client: PgPoolClient): Promise<number> {
  const known = prepared.get(client);
  if (known !== undefined) return known;
  let answers: PgQueryResult[];
  try {
    answers = await sendOn(client)(`${PREPARES.join('; ')}; ${PID}`);
  } catch (error) {
    // 42P05: one is already prepared under its name (another copy of this module on the same pool, or
    // only one of them deallocated): the same text. The rest of that message was skipped: one at a time.
    if (sqlState(error) !== '42P05') throw error;
    for (const text of PREPARES) {
      await sendPg(client, { text }).catch((again: unknown) => {
        if (sqlState(again) !== '42P05') throw again;
      });
    }
    answers = [await sendPg(client, { text: PID }) as PgQueryResult];
  }
  const pid = Number((answers[answers.length - 1]?.rows[0] as Record<string, unknown> | undefined)?.['pid']);
  prepared.set(client, pid);
  return pid;
}

/**
 * A mismatched binding aborted the transaction: roll back and read the
 * binding (and the mark) that refused us, in one message.
 */
async function refuse(client: PgPoolClient, resource: string, resourceLiteral: string, fencing: ResolvedFencing): Promise<Opened> {
  try {
    const answers = await sendOn(client)(`ROLLBACK; ${FENCE_STATE(resourceLiteral)}`);
    return { ok: false, error: refusalFrom(resource, fencing, answers[1]?.rows[0] as Record<string, unknown> | undefined), broken: undefined };
  } catch (error) {
    return { ok: false, error, broken: await rollback(client) };
  }
}

export function sendOn(client: PgPoolClient): SendMessage {
  return async (text) => {
    const answer: PgQueryResult | PgQueryResult[] = await sendPg(client, { text });
    return Array.isArray(answer) ? answer : [answer];
  };
}

/** The presented lock's kind, name, source kind and source id as literals (NULL for a bare token). */
function bindingLiterals(fencing: ResolvedFencing): string {
  return bindingValues(fencing.sequencer).map((value) => (value === null ? 'NULL::text' : `${quoteLiteral(value)}::text`)).join(', ');
}

// Kysely sends BEGIN itself, and hands back no rows for a message of several
// statements, so the fence statement's answer cannot be read when it travels
// with the savepoint. withFence needs no row from it, only "refused or not",
// and an error does come back: this variant of the statement (advanceOrRaise)
// sets the mark to NULL on a stale token, as on a mismatched sequencer, which
// the NOT NULL column refuses (SQLSTATE 23502 on fencekeeper_fences.token; a
// valid token is never NULL, so nothing else raises it there). An equal token
// only locks the row, as on a pg client. The error aborts the transaction,
// which is rolled back; then the mark and the binding are read.

/**
 * The advance and the savepoint in one message, inside a Kysely transaction
 * (after Kysely's own BEGIN: the check-only mode, and a Kysely without
 * `connection()`). A stale token rejects with StaleRefusal; the caller rolls
 * back, then calls `refusal.error(db)`.
 */
export async function openFencedKysely(trx: KyselyExecutor, resource: string, fencing: ResolvedFencing): Promise<void> {
  if (checksOnly(fencing)) {
    try {
      await checkInTransaction(trx, resource, fencing);
    } catch (error) {
      if (error instanceof StaleTokenError || error instanceof SequencerMismatchError) throw new StaleRefusal(resource, fencing);
      throw error;
    }
    await sendKysely(trx, rawQuery(OPEN_SAVEPOINT, []));
    return;
  }
  const [kind, lock, sourceKind, sourceId] = bindingLiterals(fencing).split(', ') as [string, string, string, string];
  try {
    await sendKysely(trx, rawQuery(`${advanceOrRaise(quoteLiteral(resource), tokenLiteral(fencing.token), kind, lock, sourceKind, sourceId)}; ${OPEN_SAVEPOINT}`, []));
  } catch (error) {
    if (isRefusalError(error)) throw new StaleRefusal(resource, fencing);
    throw error;
  }
}

// withFence on a Kysely instance holds one connection (db.connection()) and
// opens as on a pg client, `BEGIN; EXECUTE <name>(<literals>); SAVEPOINT`,
// with the two statements that answer by raising (./advance.ts,
// OPEN_ADVANCE_OR_RAISE and OPEN_EQUAL_OR_RAISE) in place of rows. Before
// they were prepared, the upsert's whole text went in every open message,
// parsed and planned by the server every time, and an equal token (the
// common case) paid the upsert's INSERT machinery as well as the probe's
// (measured at RTT 0, concurrency 1, test/bench/pg-kysely-cpu.mjs: see the
// commit that brought this in).
//
// Kysely offers no handle on the pg client, so whether a connection has
// prepared them is not known beforehand: the open is sent, and a connection
// that lacks one answers 26000; then one message rolls back, prepares
// whatever is missing (KYSELY_PREPARE; PREPARE is not transactional, and a
// name already taken is left alone: it carries a hash of its text) and opens
// again. So a connection's first open costs one round trip more, once.
//
// The probe is tried on the same guess as on a pg client (lastAdmitted). A
// miss (22012) is answered as there: `ROLLBACK; <the open with the upsert>`,
// and from there everything is as if the probe had never been sent. Without
// a row back the upsert cannot say that it rewrote an equal mark (a session
// not at READ COMMITTED, where a probe can never hit), and Kysely shows no
// connection to remember that for, so a resource whose probes on Kysely
// missed and were then admitted twice in a row, with no hit in between, is
// opened with the upsert from then on (kyselyMisses). Per resource, not per
// Kysely instance: `db.withSchema()` or `db.withPlugin()` per request makes a
// new instance every time, and would pay the miss every time.
const KYSELY_ADVANCE_NAME = nameOf('fencekeeper_fences_advance_or_raise', OPEN_ADVANCE_OR_RAISE);
const KYSELY_EQUAL_NAME = nameOf('fencekeeper_fences_equal_or_raise', OPEN_EQUAL_OR_RAISE);
const PARAMETERS = '(text, int8, text, text, text, text)';
const prepareIfMissing = (name: string, text: string): string => `IF NOT EXISTS (SELECT FROM pg_prepared_statements WHERE name = '${name}') THEN
    EXECUTE $s$PREPARE ${name} ${PARAMETERS} AS ${text}$s$;
  END IF;`;
const KYSELY_PREPARE = `DO $do$BEGIN
  ${prepareIfMissing(KYSELY_ADVANCE_NAME, OPEN_ADVANCE_OR_RAISE)}
  ${prepareIfMissing(KYSELY_EQUAL_NAME, OPEN_EQUAL_OR_RAISE)}
END$do$`;

/** Per resource: probes on Kysely that missed and were then admitted, in a row (bounded as lastAdmitted). */
const kyselyMisses = new Map<string, number>();
const KYSELY_MISSES_MAX = 2;

function missedThenAdmitted(resource: string): void {
  const misses = (kyselyMisses.get(resource) ?? 0) + 1;
  kyselyMisses.delete(resource);
  kyselyMisses.set(resource, misses);
  if (kyselyMisses.size > LAST_ADMITTED_MAX) kyselyMisses.delete(kyselyMisses.keys().next().value as string);
}

/**
 * withFence's open on a connection of a Kysely instance (outside a
 * transaction): BEGIN, the advance (or the probe) and the savepoint in one
 * message. A stale token or a refusing binding rejects with StaleRefusal, the
 * transaction aborted; the caller rolls back, then calls `refusal.error(db)`.
 */
export async function openFencedKyselyConnection(connection: KyselyExecutor, resource: string, fencing: ResolvedFencing): Promise<void> {
  const args = `(${quoteLiteral(resource)}, ${tokenLiteral(fencing.token)}, ${bindingLiterals(fencing)})`;
  const open = `BEGIN; EXECUTE ${KYSELY_ADVANCE_NAME}${args}; ${OPEN_SAVEPOINT}`;
  let probing = lastAdmitted.get(resource) === fencing.token && (kyselyMisses.get(resource) ?? 0) < KYSELY_MISSES_MAX;
  let missed = false;
  let prepared = false;
  // What the next message starts with: nothing, or the rollback of the attempt that failed (and the prepares).
  let prefix = '';
  for (;;) {
    try {
      await sendKysely(connection, rawQuery(`${prefix}${probing ? `BEGIN; EXECUTE ${KYSELY_EQUAL_NAME}${args}; ${OPEN_SAVEPOINT}` : open}`, []));
      break;
    } catch (error) {
      if (sqlState(error) === '26000' && !prepared) {
        prepared = true;
        prefix = `ROLLBACK; ${KYSELY_PREPARE}; `;
        continue;
      }
      if (probing && isProbeMiss(error)) {
        probing = false;
        missed = true;
        prefix = 'ROLLBACK; ';
        continue;
      }
      if (isRefusalError(error)) {
        lastAdmitted.delete(resource);
        throw new StaleRefusal(resource, fencing);
      }
      throw error;
    }
  }
  if (probing) kyselyMisses.delete(resource);
  else {
    if (missed) missedThenAdmitted(resource);
    remember(resource, fencing.token);
  }
}

/** A stale token or a mismatched sequencer refused in an aborted transaction (openFencedKysely, the store on Kysely); which it was is read once the transaction is gone. */
export class StaleRefusal {
  constructor(readonly resource: string, readonly fencing: ResolvedFencing) {}

  get token(): FencingToken { return this.fencing.token; }

  /** The mark now (at least the one that refused us: a mark never goes back), or the binding that refused us. */
  async error(db: KyselyExecutor): Promise<StaleTokenError | SequencerMismatchError> {
    return refusal(db, this.resource, this.fencing);
  }
}
