// How the fence's condition and update join the caller's own expressions in
// the one request a fenced write sends.
//
//   ConditionExpression:  (<the fence's condition>) AND (<yours>)
//     the fence's: attribute_not_exists(#fk_t)
//                  OR (attribute_type(#fk_t, :fk_n) AND #fk_t <= :fk_t)
//     #fk_t the token attribute, :fk_t our token, :fk_n the type 'N'. An item
//     never written under a fence, or a tombstone with a smaller or equal
//     token, passes; a token stored as another type fails the check (and is
//     then reported as CorruptFenceError, not as stale).
//   UpdateExpression:     your SET clause gets `#fk_t = :fk_t, ` in front,
//     your REMOVE clause `#fk_d, ` (the tombstone mark); a clause you do not
//     have is appended. ADD and DELETE clauses are left as they are.
//   The lock the item is bound to (binding.ts) is checked in the same
//   condition: `AND attribute_not_exists(#fk_l)` for a bare token,
//   `AND (attribute_not_exists(#fk_l) OR #fk_l = :fk_l)` for a sequencer.
//
// Placeholders starting with #fk_ or :fk_ are the fence's: a caller's
// ExpressionAttributeNames/Values key with that prefix, or an expression
// naming one, is refused (InvalidArgumentError), never silently shared. So is
// an expression that names the fence's attributes (through a placeholder or
// literally): the token is written by the fence alone, and a condition on it
// would blur "stale" with "your condition failed".
import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { InvalidArgumentError } from '../../src/index.js';
import { checkItemNames, checkName, describe, type FenceAttributes } from './attributes.js';

export const TOKEN_NAME = '#fk_t';
export const TOMBSTONE_NAME = '#fk_d';
export const KEY_NAME = '#fk_k';
export const LOCK_NAME = '#fk_l';
export const LOCK_VALUE = ':fk_l';
export const TOKEN_VALUE = ':fk_t';
export const NUMBER_TYPE_VALUE = ':fk_n';
/** The mark a check-only update leaves on an item that had none: 1, which admits every token as none does. */
export const FIRST_MARK_VALUE = ':fk_1';

export const FENCE_CONDITION =
  `attribute_not_exists(${TOKEN_NAME}) OR (attribute_type(${TOKEN_NAME}, ${NUMBER_TYPE_VALUE}) AND ${TOKEN_NAME} <= ${TOKEN_VALUE})`;

const RESERVED_PLACEHOLDER = /[#:]fk_/;

export interface UserExpressions {
  readonly ConditionExpression?: string | undefined;
  readonly UpdateExpression?: string | undefined;
  readonly ExpressionAttributeNames?: Record<string, string> | undefined;
  readonly ExpressionAttributeValues?: Record<string, AttributeValue> | undefined;
}

/**
 * The lock part of the condition (binding.ts): 'unbound' the item carries no
 * binding, 'bound' it carries `value`, 'either' one or the other. `set`: an
 * update writes `value` (a `bind`).
 */
export interface LockClause {
  readonly form: 'unbound' | 'bound' | 'either';
  readonly value: string | null;
  readonly set: boolean;
}

const LOCK_CONDITIONS = {
  unbound: `attribute_not_exists(${LOCK_NAME})`,
  bound: `${LOCK_NAME} = ${LOCK_VALUE}`,
  either: `(attribute_not_exists(${LOCK_NAME}) OR ${LOCK_NAME} = ${LOCK_VALUE})`,
} as const;

export interface CombinedExpressions {
  readonly ConditionExpression: string;
  readonly UpdateExpression?: string;
  readonly ExpressionAttributeNames: Record<string, string>;
  readonly ExpressionAttributeValues: Record<string, AttributeValue>;
}

/** The fence's expressions joined with the caller's (see the top of this file); `update` for UpdateItem. */
export function combine(user: UserExpressions, attributes: FenceAttributes, tokenText: string, update: boolean, lock: LockClause, mustExistKey: string | null = null, advance = true): CombinedExpressions {
  checkUserExpressions(user, attributes, update);
  const names: Record<string, string> = { ...user.ExpressionAttributeNames, [TOKEN_NAME]: attributes.token, [LOCK_NAME]: attributes.lock };
  const values: Record<string, AttributeValue> = {
    ...user.ExpressionAttributeValues,
    [TOKEN_VALUE]: { N: tokenText },
    [NUMBER_TYPE_VALUE]: { S: 'N' },
  };
  if (lock.form !== 'unbound' || lock.set) values[LOCK_VALUE] = { S: lock.value ?? '' };
  let fence = `(${FENCE_CONDITION}) AND ${LOCK_CONDITIONS[lock.form]}`;
  if (mustExistKey !== null) {
    names[KEY_NAME] = mustExistKey;
    names[TOMBSTONE_NAME] = attributes.tombstone;
    fence = `attribute_exists(${KEY_NAME}) AND attribute_not_exists(${TOMBSTONE_NAME}) AND ${fence}`;
  }
  const condition = user.ConditionExpression === undefined ? fence : `(${fence}) AND (${user.ConditionExpression})`;
  if (!update) return { ConditionExpression: condition, ExpressionAttributeNames: names, ExpressionAttributeValues: values };
  names[TOMBSTONE_NAME] = attributes.tombstone;
  if (!advance) values[FIRST_MARK_VALUE] = { N: '1' };
  return {
    ConditionExpression: condition,
    UpdateExpression: fenceUpdate(user.UpdateExpression, lock.set, advance),
    ExpressionAttributeNames: names,
    ExpressionAttributeValues: values,
  };
}

// SET/REMOVE/ADD/DELETE are reserved words: in an expression they can only be
// clause keywords (a name spelled so must go through a placeholder), and there
// are no string literals. So a keyword not glued to a name, placeholder or
// path step is a clause.
const CLAUSE = /(?<![#:.\w])(SET|REMOVE|ADD|DELETE)(?!\w)/gi;

export function fenceUpdate(user: string | undefined, setLock = false, advance = true): string {
  // Check-only keeps the stored token (none yet: 1, which admits every token as none does).
  const mark = advance ? TOKEN_VALUE : `if_not_exists(${TOKEN_NAME}, ${FIRST_MARK_VALUE})`;
  const set = `${TOKEN_NAME} = ${mark}${setLock ? `, ${LOCK_NAME} = ${LOCK_VALUE}` : ''}`;
  const remove = TOMBSTONE_NAME;
  if (user === undefined || user.trim() === '') return `SET ${set} REMOVE ${remove}`;
  let sawSet = false;
  let sawRemove = false;
  const joined = user.replace(CLAUSE, (keyword: string) => {
    const upper = keyword.toUpperCase();
    // A second SET (or REMOVE) is the caller's error; DynamoDB reports it as sent.
    if (upper === 'SET' && !sawSet) { sawSet = true; return `${keyword} ${set},`; }
    if (upper === 'REMOVE' && !sawRemove) { sawRemove = true; return `${keyword} ${remove},`; }
    return keyword;
  });
  return `${joined}${sawSet ? '' : ` SET ${set}`}${sawRemove ? '' : ` REMOVE ${remove}`}`;
}

function checkUserExpressions(user: UserExpressions, attributes: FenceAttributes, update: boolean): void {
  for (const field of ['ConditionExpression', 'UpdateExpression'] as const) {
    const text = user[field];
    if (text === undefined) continue;
    if (field === 'UpdateExpression' && !update) throw new InvalidArgumentError('UpdateExpression belongs to fencedUpdateItem');
    if (typeof text !== 'string' || text.trim() === '') throw new InvalidArgumentError(`${field} must be a non-empty string when given`);
    if (RESERVED_PLACEHOLDER.test(text)) {
      throw new InvalidArgumentError(`${field} names a placeholder starting with #fk_ or :fk_; that prefix is reserved for the fence: rename yours`);
    }
    for (const name of [attributes.token, attributes.tombstone, attributes.lock]) {
      if (new RegExp(`(?<![#:\\w])${name}(?!\\w)`).test(text)) {
        throw new InvalidArgumentError(`${field} names the fence's attribute ${name}: the fence alone reads and writes it (readFence reads it)`);
      }
    }
  }
  const names = user.ExpressionAttributeNames;
  if (names !== undefined) {
    if (typeof names !== 'object' || names === null) throw new InvalidArgumentError('ExpressionAttributeNames must be a map of #placeholder to name');
    for (const [placeholder, name] of Object.entries(names)) {
      if (placeholder.startsWith('#fk_')) throw new InvalidArgumentError(`ExpressionAttributeNames: ${describe(placeholder)}: the prefix #fk_ is reserved for the fence`);
      if (typeof name !== 'string') throw new InvalidArgumentError(`ExpressionAttributeNames[${describe(placeholder)}] must be a string`);
      checkName(`ExpressionAttributeNames[${placeholder}]`, name);
      if (name === attributes.token || name === attributes.tombstone || name === attributes.lock) {
        throw new InvalidArgumentError(`ExpressionAttributeNames[${describe(placeholder)}] names the fence's attribute ${name}: the fence alone reads and writes it`);
      }
    }
  }
  const values = user.ExpressionAttributeValues;
  if (values !== undefined) {
    if (typeof values !== 'object' || values === null) throw new InvalidArgumentError('ExpressionAttributeValues must be a map of :placeholder to attribute value');
    for (const placeholder of Object.keys(values)) {
      if (placeholder.startsWith(':fk_')) throw new InvalidArgumentError(`ExpressionAttributeValues: ${describe(placeholder)}: the prefix :fk_ is reserved for the fence`);
    }
    checkItemNames('ExpressionAttributeValues', values);
  }
}
