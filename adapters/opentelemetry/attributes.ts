// Attribute names, following OpenTelemetry's naming rules: lower case,
// namespaced by dots, words within a component joined by underscores; the
// error's kind under the general `error.type`. Tokens are decimal strings
// (an attribute number is a double: a token past 2^53 would be rounded).
import { InvalidArgumentError } from '../../src/index.js';

/** The OpenTelemetry attribute names fencekeeper's spans and metrics use (fencekeeper.lock.source, fencekeeper.lock.name, ...). */
export const ATTR = Object.freeze({
  source: 'fencekeeper.lock.source',
  lock: 'fencekeeper.lock.name',
  mode: 'fencekeeper.lock.mode',
  acquired: 'fencekeeper.lock.acquired',
  lossReason: 'fencekeeper.lock.loss_reason',
  election: 'fencekeeper.election.name',
  token: 'fencekeeper.fencing_token',
  adapter: 'fencekeeper.adapter',
  resource: 'fencekeeper.resource',
  operation: 'fencekeeper.operation',
  layout: 'fencekeeper.s3.layout',
  outcome: 'fencekeeper.outcome',
  effectKey: 'fencekeeper.effect.key',
  effectSource: 'fencekeeper.effect.source',
  sessionState: 'fencekeeper.session.state',
  activity: 'fencekeeper.source.activity',
  resolution: 'fencekeeper.s3.resolution',
  errorType: 'error.type',
} as const);

/**
 * What becomes of lock, election and resource names in attributes, where
 * they can make a metric's series unbounded (a lock per customer, a
 * resource per row). 'keep' (the default) records them as they are; 'drop'
 * leaves the attribute out; a function maps each name (to a group, a
 * prefix), and returning undefined leaves it out.
 */
export type NameMapping = 'keep' | 'drop' | ((name: string, kind: 'lock' | 'election' | 'resource') => string | undefined);

export type MapName = (name: string, kind: 'lock' | 'election' | 'resource') => string | undefined;

export function nameMapper(option: unknown): MapName {
  if (option === undefined || option === 'keep') return (name) => name;
  if (option === 'drop') return () => undefined;
  if (typeof option === 'function') {
    const map = option as MapName;
    return (name, kind) => {
      const mapped = map(name, kind);
      return typeof mapped === 'string' ? mapped : undefined;
    };
  }
  throw new InvalidArgumentError(`instrument(): names must be 'keep', 'drop' or a function, got ${typeof option === 'string' ? JSON.stringify(option) : typeof option}`);
}

/** The stable code of a fencekeeper error, else the error's name: OpenTelemetry's `error.type`. */
export function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const { code, name } = error as { code?: unknown; name?: unknown };
    if (typeof code === 'string' && code.length > 0) return code;
    if (typeof name === 'string' && name.length > 0) return name;
  }
  return '_OTHER';
}
