// Opening a fenced transaction with as few round trips as the driver allows.
// On a pg client, one:
//
//   BEGIN; EXECUTE fencekeeper_fences_advance_<hash>(E'<resource>', <token>::int8); SAVEPOINT fencekeeper_fenced
//
// as one simple-query message. PostgreSQL runs its statements in order and
// answers each (node-postgres hands back one result per statement), so the
// fence statement's row is read from the second answer. A simple-query
// message carries no parameters: the resource travels as an E'' literal
// (quoteLiteral) and the token as the digits of a validated bigint.
//
// The fence statement itself is prepared once per connection, with SQL
// PREPARE, on the first open a connection sees: EXECUTE then skips parsing
// and planning the upsert on every admission, which a literal upsert would
// pay on the server each time. PREPARE is not transactional (a rollback
// keeps it), and the name carries a hash of the text, so a statement found
// under that name is this one.
//
// A stale token (no row back: the upsert's WHERE refused it, holding the row
// lock) costs one more message, which reads the mark that refused us under
// that lock and rolls back: `SELECT ...; ROLLBACK`. Success costs nothing
// beyond the message that replaced BEGIN.
//
// On a Kysely transaction (BEGIN already sent by Kysely): the advance and the
// savepoint in one message, for withFence (see openFencedKysely).
import { createHash } from 'node:crypto';
import type { FencingToken, ResolvedFencing, SequencerMismatchError, StaleTokenError } from '../../src/index.js';
import { rawQuery, readBigint, sqlState, type KyselyExecutor, type PgPoolClient, type PgQueryResult } from './database.js';
import { CancelledWait } from './cancel.js';
import { ADVANCE_CHECKED, FENCE_STATE, advanceOrFail, bindingValues, refusal, refusalFrom, type Advanced } from './fence-row.js';
import { OPEN_SAVEPOINT, rollback } from './fenced-transaction.js';
import { quoteLiteral, tokenLiteral } from './identifiers.js';

const PREPARED_NAME = `fencekeeper_fences_advance_${createHash('sha256').update(ADVANCE_CHECKED).digest('hex').slice(0, 16)}`;
const PREPARE = `PREPARE ${PREPARED_NAME} (text, int8, text, text, text, text) AS ${ADVANCE_CHECKED}`;

/** Connections on which PREPARE has run (pg.Pool hands out the same client object for a connection). */
const prepared = new WeakSet<PgPoolClient>();

/** Sends a simple-query message and answers every statement's result. */
export type SendMessage = (text: string) => Promise<PgQueryResult[]>;

export type Opened =
  | { readonly ok: true; readonly advanced: Advanced }
  /** Not opened; the transaction was rolled back. `broken`: the client is unusable and must be destroyed. */
  | { readonly ok: false; readonly error: unknown; readonly broken: Error | undefined };

/**
 * BEGIN, advance the fence of `resource` to `token` and set the savepoint, in
 * one message on `client` (idle, outside a transaction). `send` carries that
 * message (the store's makes it cancellable while it waits for the row lock;
 * a CancelledWait it throws is passed through, the transaction left to the
 * caller, which destroys the client).
 * Every other failure, and a stale token, is answered with the transaction
 * already rolled back.
 */
export async function openFenced(client: PgPoolClient, resource: string, fencing: ResolvedFencing, send: SendMessage = sendOn(client)): Promise<Opened> {
  const resourceLiteral = quoteLiteral(resource);
  const open = `BEGIN; EXECUTE ${PREPARED_NAME}(${resourceLiteral}, ${tokenLiteral(fencing.token)}, ${bindingLiterals(fencing)}); ${OPEN_SAVEPOINT}`;
  for (let attempt = 1; ; attempt += 1) {
    try {
      await prepare(client);
    } catch (error) {
      return { ok: false, error, broken: undefined }; // outside a transaction: nothing to roll back
    }
    let answers: PgQueryResult[];
    try {
      answers = await send(open);
    } catch (error) {
      if (error instanceof CancelledWait) throw error;
      const broken = await rollback(client);
      // The statement is gone from this connection (DEALLOCATE ALL or DISCARD ALL ran on it): prepare it again, once.
      if (sqlState(error) === '26000' && broken === undefined && attempt === 1) {
        prepared.delete(client);
        continue;
      }
      return { ok: false, error, broken };
    }
    const row = answers[1]?.rows[0] as Record<string, unknown> | undefined;
    if (row !== undefined) return { ok: true, advanced: { previous: readBigint(row['previous']), pid: Number(row['pid']) } };
    return refuse(client, resource, resourceLiteral, fencing);
  }
}

async function prepare(client: PgPoolClient): Promise<void> {
  if (prepared.has(client)) return;
  try {
    await client.query({ text: PREPARE });
  } catch (error) {
    // 42P05: already prepared under this name (another copy of this module on the same pool): the same text.
    if (sqlState(error) !== '42P05') throw error;
  }
  prepared.add(client);
}

/**
 * The refused path: read the mark and the binding that refused us (for a
 * stale token our row lock still holds the mark) and roll back, in one message.
 */
async function refuse(client: PgPoolClient, resource: string, resourceLiteral: string, fencing: ResolvedFencing): Promise<Opened> {
  try {
    const answers = await sendOn(client)(`${FENCE_STATE(resourceLiteral)}; ROLLBACK`);
    return { ok: false, error: refusalFrom(resource, fencing, answers[0]?.rows[0] as Record<string, unknown> | undefined), broken: undefined };
  } catch (error) {
    return { ok: false, error, broken: await rollback(client) };
  }
}

export function sendOn(client: PgPoolClient): SendMessage {
  return async (text) => {
    const answer: PgQueryResult | PgQueryResult[] = await client.query({ text });
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
// and an error does come back: this variant of the upsert (advanceOrFail)
// always updates on conflict, and on a stale token or a mismatched sequencer
// sets the mark to NULL, which the NOT NULL column refuses (SQLSTATE 23502 on
// fencekeeper_fences.token; a valid token is never NULL, so nothing else
// raises it there). The error aborts the transaction, which is rolled back;
// then the mark and the binding are read.

/**
 * The advance and the savepoint in one message, inside a Kysely transaction
 * (after Kysely's own BEGIN). A stale token rejects with StaleRefusal; the
 * caller lets Kysely roll back, then calls `refusal.error(db)`.
 */
export async function openFencedKysely(trx: KyselyExecutor, resource: string, fencing: ResolvedFencing): Promise<void> {
  const [kind, lock, sourceKind, sourceId] = bindingLiterals(fencing).split(', ') as [string, string, string, string];
  try {
    await trx.executeQuery(rawQuery(`${advanceOrFail(quoteLiteral(resource), tokenLiteral(fencing.token), kind, lock, sourceKind, sourceId)}; ${OPEN_SAVEPOINT}`, []));
  } catch (error) {
    if (isStaleRefusal(error)) throw new StaleRefusal(resource, fencing);
    throw error;
  }
}

function isStaleRefusal(error: unknown): boolean {
  const fields = error as { table?: unknown; column?: unknown } | null;
  return sqlState(error) === '23502' && fields?.table === 'fencekeeper_fences' && fields.column === 'token';
}

/** A stale token or a mismatched sequencer refused by openFencedKysely; which it was is read once the transaction is gone. */
export class StaleRefusal {
  constructor(readonly resource: string, readonly fencing: ResolvedFencing) {}

  get token(): FencingToken { return this.fencing.token; }

  /** The mark now (at least the one that refused us: a mark never goes back), or the binding that refused us. */
  async error(db: KyselyExecutor): Promise<StaleTokenError | SequencerMismatchError> {
    return refusal(db, this.resource, this.fencing);
  }
}
