// Fenced writes to DynamoDB items: one request per write (a put or delete of
// an item bound to a lock: two, see binding.ts). The token is compared and
// stored by the write itself (expressions.ts), so the check and the write are
// one atomic step on the service; nothing is read first.
//
//   fencedPutItem     PutItem, the item plus the token attribute
//   fencedUpdateItem  UpdateItem, the caller's update plus SET of the token
//                     (and REMOVE of the tombstone mark)
//   fencedDeleteItem  PutItem of a tombstone: the key, the token and
//                     `fencing_deleted: true`. A real DeleteItem would erase the
//                     mark, and a paused holder could then write the item
//                     again with its old token. GetItem returns the tombstone
//                     item as it is; readFence still reports its token.
//
// Equal tokens pass (a holder writes many times), a smaller one is refused
// with StaleTokenError carrying the item's current token, a larger one
// advances the mark. When the condition fails, the current token comes from
// the item the service returns with ConditionalCheckFailedException
// (ReturnValuesOnConditionCheckFailure: 'ALL_OLD', DynamoDB since 2023),
// else, where the service does not send it (dynalite 4), from one strongly
// consistent GetItem. An item bound to another lock (or a bare token on a
// bound item): SequencerMismatchError. A stored token larger than ours:
// stale. A token stored as another type: CorruptFenceError. Otherwise it was
// the caller's own condition that failed: its ConditionalCheckFailedException
// is rethrown.
//
// Multi-item transactions (TransactWriteItems) are not offered: dynalite, the
// only DynamoDB-API server these tests can run, does not implement them.
import { ConditionalCheckFailedException, DescribeTableCommand, GetItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import type {
  AttributeValue, DeleteItemCommandInput, DynamoDBClient, PutItemCommandInput, UpdateItemCommandInput,
} from '@aws-sdk/client-dynamodb';
import { InvalidArgumentError, StaleTokenError, formatToken, resolveFencing, type FenceBinding, type Fencing, type FencingToken, type ResolvedFencing } from '../../src/index.js';
import { fenceAdvances, publishRefused, refuseCheckOnly, traceFencedWrite } from '../../src/extend.js';
import {
  checkItemNames, checkItemSize, checkKey, checkTableName, fenceAttributes, resourceName, storedToken,
  type FenceAttributeOptions, type FenceAttributes,
} from './attributes.js';
import { bindingOf, checkBindOption, formatBinding, mismatch, storedBinding } from './binding.js';
import { combine, type LockClause } from './expressions.js';

/** Options of every fenced item write: the attribute names, an abort signal, and `bind` to bind the item's fence to its lock with this write. */
export interface FencedItemOptions extends FenceAttributeOptions {
  /** Aborts the request (and the read that classifies a refusal). */
  readonly signal?: AbortSignal;
  /**
   * Bind the item's fence to this lock (a FenceBinding: the lock's kind, name and source) with this write: the
   * write must present a sequencer of that lock. From then on the item takes
   * only that lock's sequencers (SequencerMismatchError for any other lock's
   * and for bare tokens). Binding again to the same lock is a no-op; items
   * never bound take bare tokens and sequencers alike.
   */
  readonly bind?: FenceBinding;
}

/** fencedUpdateItem's options: those of every write, and `mustExist` to update only an item that exists and is not a tombstone. */
export interface FencedUpdateOptions extends FencedItemOptions {
  /**
   * False: check-only (a reader of a read-write lock): the update is made
   * only if the token is at least the item's, as always, but the item keeps
   * its stored token (an item without one gets 1, which admits every token
   * as none does). Default true. fencedPutItem and fencedDeleteItem have no
   * check-only mode: they replace the whole item, token attribute included,
   * and DynamoDB cannot copy the stored token into a PutItem's new item.
   */
  readonly advance?: boolean;
  /**
   * Update only an item that exists and is not a tombstone (the fence's
   * condition then also holds `attribute_exists(<first key attribute>) AND
   * attribute_not_exists(<tombstone attribute>)`). Default false: like
   * UpdateItem, create the item (or revive a tombstone).
   */
  readonly mustExist?: boolean;
}

function mustExistOption(value: unknown, key: Record<string, AttributeValue>): string | null {
  if (value === undefined || value === false) return null;
  if (value !== true) throw new InvalidArgumentError('mustExist must be a boolean');
  return Object.keys(key)[0] ?? null;
}

/** The `token` field every fenced DynamoDB write (fencedPutItem, fencedUpdateItem, fencedDeleteItem) takes beside DynamoDB's own input. */
export interface FencedItemToken {
  /**
   * The holder's fencing token (the lock's `token`), its sequencer (the
   * lock's `sequencer`), the Lock or Leadership itself (its sequencer is
   * used; LockLostError before any request once it is not held) or
   * CURRENT_LOCK (the lock of the enclosing withLock): whatever the core's
   * resolveFencing takes.
   */
  readonly token: Fencing;
}

/**
 * The DynamoDB input fields a fenced write does not take: `Expected`,
 * `ConditionalOperator` and `AttributeUpdates` are the legacy forms DynamoDB
 * refuses to mix with the condition expression the fence adds (write your
 * condition as a ConditionExpression instead), and
 * `ReturnValuesOnConditionCheckFailure` is set by the fence itself to read the
 * current token of a refused write.
 */
export type FencedItemOmittedField = 'Expected' | 'ConditionalOperator' | 'AttributeUpdates' | 'ReturnValuesOnConditionCheckFailure';

/** fencedPutItem's input: PutItem's (TableName, Item, your condition and placeholders) and the `token` (a token, a sequencer or CURRENT_LOCK). */
export type FencedPutItemInput = Omit<PutItemCommandInput, FencedItemOmittedField | 'ReturnValues'> & FencedItemToken & {
  /** 'NONE' (default) or 'ALL_OLD': the item the write replaced, a tombstone included. */
  readonly ReturnValues?: 'NONE' | 'ALL_OLD';
};
/** fencedUpdateItem's input: UpdateItem's (TableName, Key, your UpdateExpression and condition) and the `token`. */
export type FencedUpdateItemInput = Omit<UpdateItemCommandInput, FencedItemOmittedField> & FencedItemToken;
/** fencedDeleteItem's input: DeleteItem's (TableName, Key, your condition) and the `token`; the item is replaced by a tombstone that keeps it. */
export type FencedDeleteItemInput = Omit<DeleteItemCommandInput, FencedItemOmittedField | 'ReturnValues'> & FencedItemToken & {
  /** 'NONE' (default) or 'ALL_OLD': the item the tombstone replaced. */
  readonly ReturnValues?: 'NONE' | 'ALL_OLD';
};

/** What a fenced item write resolves to: the token now stored in the item, and the attributes ReturnValues asked for. */
export interface FencedItemResult {
  /** The token the write presented: after an advancing write, the one now stored in the item (a check-only update leaves the stored one). */
  readonly token: FencingToken;
  /** What ReturnValues asked for (undefined for 'NONE'). */
  readonly Attributes?: Record<string, AttributeValue> | undefined;
}

/**
 * PutItem only if `token` is at least the item's stored token; the item is
 * written with the token in its token attribute (default `fencing_token`,
 * which `Item` must not carry). A tombstone left by fencedDeleteItem is
 * replaced like any item. Your ConditionExpression is ANDed with the fence's.
 * Throws StaleTokenError (nothing written) for a smaller token,
 * SequencerMismatchError when the item is bound to another lock (or to a lock
 * at all, for a bare token), CorruptFenceError for a token or binding stored
 * as something it cannot be,
 * InvalidArgumentError for unusable input or a missing table (nothing
 * written), InvalidTokenError for a bad token; your condition's failure
 * passes through as the SDK's ConditionalCheckFailedException.
 */
export async function fencedPutItem(client: DynamoDBClient, input: FencedPutItemInput, options: FencedItemOptions = {}): Promise<FencedItemResult> {
  const { fencing, table, attributes, bind } = checkWrite('fencedPutItem', input, options);
  refuseCheckOnly(fenceAdvances(options, 'fencedPutItem'), 'fencedPutItem', NO_CHECK_ONLY_PUT);
  const item = input.Item;
  if (typeof item !== 'object' || item === null || Array.isArray(item)) throw new InvalidArgumentError('fencedPutItem needs an Item');
  checkItemNames('Item', item);
  for (const name of [attributes.token, attributes.tombstone, attributes.lock]) {
    if (Object.hasOwn(item, name)) throw new InvalidArgumentError(`Item carries ${name}, the fence's attribute: the fence writes it`);
  }
  const keyNames = await keySchema(client, table, options.signal);
  const key = checkKey(Object.fromEntries(keyNames.map((n) => [n, item[n]])), 'Item (its key attributes)');
  const resource = resourceName(table, key);
  const { token: _token, ...rest } = input;
  const written = { ...item, [attributes.token]: { N: formatToken(fencing.token) } };
  checkItemSize(`the item ${resource}`, withBinding(written, attributes, fencing));
  return traceFencedWrite('dynamodb', 'upsert', resource, fencing.token, () =>
    send(client, { table, key, resource, fencing, attributes, signal: options.signal, replaces: true }, bind, (lock) => new PutItemCommand({
      ...rest,
      Item: lock.form === 'unbound' ? written : withBinding(written, attributes, fencing),
      ...combine(input, attributes, formatToken(fencing.token), false, lock),
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    })));
}

/**
 * UpdateItem only if `token` is at least the item's stored token: your
 * UpdateExpression (optional: without one the write only advances the mark)
 * with `SET <token attribute> = token` and `REMOVE <tombstone attribute>`
 * joined in, your ConditionExpression ANDed with the fence's. Like UpdateItem,
 * it creates the item when none exists, and revives a tombstone (a tombstone
 * is an item: `attribute_exists(pk)` holds for it); with `{ mustExist: true }`
 * it updates only an item that exists and is not a tombstone; otherwise the
 * SDK's ConditionalCheckFailedException, nothing written. Errors as
 * fencedPutItem's.
 */
export async function fencedUpdateItem(client: DynamoDBClient, input: FencedUpdateItemInput, options: FencedUpdateOptions = {}): Promise<FencedItemResult> {
  const { fencing, table, attributes, bind } = checkWrite('fencedUpdateItem', input, options);
  const advance = fenceAdvances(options, 'fencedUpdateItem');
  const key = checkWrittenKey(input.Key, attributes);
  const resource = resourceName(table, key);
  const values = input.ExpressionAttributeValues;
  if (values !== undefined) checkItemSize(`the update of ${resource} (its ExpressionAttributeValues)`, values);
  const { token: _token, ...rest } = input;
  const mustExist = mustExistOption(options.mustExist, key);
  return traceFencedWrite('dynamodb', 'update', resource, fencing.token, () =>
    send(client, { table, key, resource, fencing, attributes, signal: options.signal, replaces: false }, bind, (lock) => new UpdateItemCommand({
      ...rest, Key: key, ...combine(input, attributes, formatToken(fencing.token), true, lock, mustExist, advance), ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    })));
}

/**
 * Delete an item without losing its fence: replace it, conditionally as
 * fencedPutItem does, with a tombstone `{ ...Key, fencing_token: token,
 * fencing_deleted: true }`. Afterwards a smaller token is refused, an equal
 * or larger one may write the item again; GetItem returns the tombstone
 * (test `fencing_deleted`, or use isTombstone), readFence its token.
 * Deleting a missing item leaves a tombstone too. Errors as fencedPutItem's.
 */
export async function fencedDeleteItem(client: DynamoDBClient, input: FencedDeleteItemInput, options: FencedItemOptions = {}): Promise<FencedItemResult> {
  const { fencing, table, attributes, bind } = checkWrite('fencedDeleteItem', input, options);
  refuseCheckOnly(fenceAdvances(options, 'fencedDeleteItem'), 'fencedDeleteItem', NO_CHECK_ONLY_PUT);
  const key = checkWrittenKey(input.Key, attributes);
  const resource = resourceName(table, key);
  const { token: _token, Key: _key, ...rest } = input;
  const tombstone = { ...key, [attributes.token]: { N: formatToken(fencing.token) }, [attributes.tombstone]: { BOOL: true } };
  return traceFencedWrite('dynamodb', 'delete', resource, fencing.token, () =>
    send(client, { table, key, resource, fencing, attributes, signal: options.signal, replaces: true }, bind, (lock) => new PutItemCommand({
      ...rest,
      Item: lock.form === 'unbound' ? tombstone : withBinding(tombstone, attributes, fencing),
      ...combine(input, attributes, formatToken(fencing.token), false, lock),
      ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
    })));
}

/** True for the tombstone fencedDeleteItem leaves (GetItem returns it as an item). */
export function isTombstone(item: Record<string, AttributeValue> | undefined | null, options: FenceAttributeOptions = {}): boolean {
  const { tombstone } = fenceAttributes(options);
  return item?.[tombstone]?.BOOL === true;
}

/** The Key of an update or a delete: well-formed, and naming none of the fence's own attributes. */
function checkWrittenKey(key: unknown, attributes: FenceAttributes): Record<string, AttributeValue> {
  const checked = checkKey(key);
  for (const name of [attributes.token, attributes.tombstone, attributes.lock]) {
    if (Object.hasOwn(checked, name)) throw new InvalidArgumentError(`Key names ${name}, the fence's attribute`);
  }
  return checked;
}

function checkWrite(operation: string, input: object, options: FencedItemOptions): { fencing: ResolvedFencing; table: string; attributes: FenceAttributes; bind: FenceBinding | null } {
  if (typeof input !== 'object' || input === null) throw new InvalidArgumentError(`${operation} needs an input object`);
  const fencing = resolveFencing((input as { token?: unknown }).token);
  const table = checkTableName((input as { TableName?: unknown }).TableName);
  for (const field of ['Expected', 'ConditionalOperator', 'AttributeUpdates', 'ReturnValuesOnConditionCheckFailure'] as const) {
    if ((input as Record<string, unknown>)[field] !== undefined) {
      throw new InvalidArgumentError(`${operation}: ${field} cannot be combined with the fence (use ConditionExpression / UpdateExpression)`);
    }
  }
  const attributes = fenceAttributes(options);
  const bind = checkBindOption(options.bind, fencing);
  if (options.signal?.aborted) throw options.signal.reason;
  return { fencing, table, attributes, bind };
}

/** The item with the presented sequencer's lock in the lock attribute (a bare token has none to write). */
function withBinding(item: Record<string, AttributeValue>, attributes: FenceAttributes, fencing: ResolvedFencing): Record<string, AttributeValue> {
  return fencing.sequencer === null ? item : { ...item, [attributes.lock]: { S: formatBinding(bindingOf(fencing.sequencer)) } };
}

type FenceCommand = PutItemCommand | UpdateItemCommand;

// Why a PutItem (fencedPutItem, fencedDeleteItem's tombstone) cannot only check.
const NO_CHECK_ONLY_PUT = 'a PutItem replaces the whole item, its token attribute included, and cannot copy the stored token into the new item; use fencedUpdateItem with { advance: false }';

interface Target {
  readonly table: string;
  readonly key: Record<string, AttributeValue>;
  readonly resource: string;
  readonly fencing: ResolvedFencing;
  readonly attributes: FenceAttributes;
  readonly signal: AbortSignal | undefined;
  /** A PutItem: it replaces the whole item, so it must carry a binding the item has (binding.ts). */
  readonly replaces: boolean;
}

// A PutItem of a bound item is sent again once the refusal has shown the
// binding (binding.ts); a third round would mean the binding came and went
// in between (plain writes by someone else): report the refusal as it is.
const MAX_ROUNDS = 3;

async function send(client: DynamoDBClient, target: Target, bind: FenceBinding | null, command: (lock: LockClause) => FenceCommand): Promise<FencedItemResult> {
  const { fencing } = target;
  const value = fencing.sequencer === null ? null : formatBinding(bindingOf(fencing.sequencer));
  // A bare token: the item must be unbound. A sequencer: bound to its lock or not bound;
  // an update (or a bind) says so in one condition, a put starts from "not bound".
  let form: LockClause['form'] = value === null ? 'unbound' : bind !== null || !target.replaces ? 'either' : 'unbound';
  for (let round = 1; ; round++) {
    try {
      const output = await client.send(command({ form, value, set: bind !== null }) as PutItemCommand, abortOptions(target.signal));
      return { token: fencing.token, Attributes: output.Attributes };
    } catch (error) {
      if (!isNamed(error, 'ConditionalCheckFailedException')) throw translate(error, target.table);
      const verdict = await refusal(client, target, form, error as ConditionalCheckFailedException);
      if (verdict instanceof Error) throw verdict;
      if (round >= MAX_ROUNDS) throw error;
      form = verdict;
    }
  }
}

/**
 * What a failed condition means: the item the service returned with the
 * exception, else one strongly consistent read, says which part failed. An
 * error to throw, or the lock form a PutItem should be sent again with.
 */
async function refusal(client: DynamoDBClient, target: Target, form: LockClause['form'], error: ConditionalCheckFailedException): Promise<Error | LockClause['form']> {
  const { resource, fencing, attributes } = target;
  const item = error.Item !== undefined ? error.Item : await readItem(client, target.table, target.key, target.signal);
  const current = storedToken(resource, item, attributes.token);
  const bound = storedBinding(resource, item, attributes.lock);
  // Tokens of another lock are not comparable: the lock first.
  const refused = mismatch(resource, bound, fencing);
  if (refused !== null) {
    publishRefused('dynamodb', refused, fencing.token);
    return refused;
  }
  if (current !== null && current > fencing.token) {
    const stale = new StaleTokenError(resource, fencing.token, current, { cause: error });
    publishRefused('dynamodb', stale);
    return stale;
  }
  if (target.replaces && form === 'unbound' && bound !== null) return 'bound';
  if (target.replaces && form === 'bound' && bound === null) return 'unbound';
  return error;
}

async function readItem(client: DynamoDBClient, table: string, key: Record<string, AttributeValue>, signal: AbortSignal | undefined): Promise<Record<string, AttributeValue> | undefined> {
  try {
    const output = await client.send(new GetItemCommand({ TableName: table, Key: key, ConsistentRead: true }), abortOptions(signal));
    return output.Item;
  } catch (error) {
    throw translate(error, table);
  }
}

/**
 * The fence's token in the item at `Key`: null when the item does not exist
 * or was never written under a fence. A tombstone still reports its token.
 * One strongly consistent GetItem of the key and the token attribute.
 * CorruptFenceError for a token stored as anything but a token.
 */
export async function readFence(
  client: DynamoDBClient,
  input: { readonly TableName: string; readonly Key: Record<string, AttributeValue> },
  options: FencedItemOptions = {},
): Promise<FencingToken | null> {
  const table = checkTableName(input?.TableName);
  const key = checkKey(input.Key);
  const attributes = fenceAttributes(options);
  try {
    const output = await client.send(new GetItemCommand({
      TableName: table, Key: key, ConsistentRead: true,
      ProjectionExpression: '#fk_t', ExpressionAttributeNames: { '#fk_t': attributes.token },
    }), abortOptions(options.signal));
    return storedToken(resourceName(table, key), output.Item, attributes.token);
  } catch (error) {
    throw translate(error, table);
  }
}

// The key attribute names of each table, read once per client (DescribeTable)
// when a PutItem's refusal needs the item's key, which the Item alone does
// not say. A table's key schema cannot change.
const schemas = new WeakMap<DynamoDBClient, Map<string, Promise<readonly string[]>>>();

async function keySchema(client: DynamoDBClient, table: string, signal: AbortSignal | undefined): Promise<readonly string[]> {
  let tables = schemas.get(client);
  if (tables === undefined) schemas.set(client, tables = new Map());
  let names = tables.get(table);
  if (names === undefined) {
    names = client.send(new DescribeTableCommand({ TableName: table }), abortOptions(signal)).then(
      (output) => (output.Table?.KeySchema ?? []).map((k) => k.AttributeName ?? ''),
      (error: unknown) => { throw translate(error, table); },
    );
    tables.set(table, names);
    // A failed describe (a missing table, a lost connection) is not kept: the next write asks again.
    names.catch(() => tables.delete(table));
  }
  return names;
}

/** A missing table and an item over the size limit as InvalidArgumentError (nothing was written); anything else as sent. */
function translate(error: unknown, table: string): unknown {
  if (isNamed(error, 'ResourceNotFoundException')) {
    return new InvalidArgumentError(`DynamoDB table ${table} does not exist (or is not ACTIVE yet): create it first, with your key schema; the fence needs no attribute definition of its own`, { cause: error });
  }
  if (isNamed(error, 'ValidationException') && /item size|exceeded the maximum allowed size/i.test((error as Error).message)) {
    return new InvalidArgumentError(`the write to ${table} would make the item larger than DynamoDB's 400 KB limit; nothing written (${(error as Error).message})`, { cause: error });
  }
  return error;
}

function isNamed(error: unknown, name: string): boolean {
  return typeof error === 'object' && error !== null && (error as { name?: unknown }).name === name;
}

function abortOptions(signal: AbortSignal | undefined): { abortSignal?: AbortSignal } {
  return signal === undefined ? {} : { abortSignal: signal };
}
