import { describe, expect, it, vi } from 'vitest';
import * as errors from '../../src/errors.js';
import {
  ClientClosedError,
  ConnectionLossError,
  FencekeeperError,
  InvalidArgumentError,
  InvalidTokenError,
  LockLostError,
  LockTimeoutError,
  ProtocolError,
  SessionExpiredError,
  StaleTokenError,
  UnknownOutcomeError,
  ZooKeeperError,
  isCode,
} from '../../src/errors.js';

type ErrorsModule = typeof errors;

// One of each, built the way the library builds them.
function samples(m: ErrorsModule) {
  return {
    StaleTokenError: new m.StaleTokenError('accounts/7', 5n, 9n),
    InvalidTokenError: new m.InvalidTokenError('bad token'),
    InvalidArgumentError: new m.InvalidArgumentError('bad path'),
    LockLostError: new m.LockLostError('jobs', 'deadline'),
    LockTimeoutError: new m.LockTimeoutError('jobs', 250),
    SessionExpiredError: new m.SessionExpiredError(),
    ConnectionLossError: new m.ConnectionLossError(),
    ClientClosedError: new m.ClientClosedError(),
    ProtocolError: new m.ProtocolError('xid out of order'),
    UnknownOutcomeError: new m.UnknownOutcomeError('500 after conditional PUT'),
    ZooKeeperError: new m.ZooKeeperError('ZK_NONODE', -101, '/a/b'),
    SchemaMissingError: new m.SchemaMissingError('fencekeeper_fences', 'run migrate(db)'),
    LockUpgradeError: new m.LockUpgradeError('jobs'),
    LockOrderError: new m.LockOrderError('a', 'b'),
    AmbiguousLockError: new m.AmbiguousLockError(['a', 'b']),
    PermitsMismatchError: new m.PermitsMismatchError('pool', 3, 2),
  } as const;
}

type Name = keyof ReturnType<typeof samples>;

// The stable codes: callers switch on these, so changing one is a breaking change.
const CODES: Record<Name, string> = {
  StaleTokenError: 'STALE_TOKEN',
  InvalidTokenError: 'INVALID_TOKEN',
  InvalidArgumentError: 'INVALID_ARGUMENT',
  LockLostError: 'LOCK_LOST',
  LockTimeoutError: 'LOCK_TIMEOUT',
  SessionExpiredError: 'SESSION_EXPIRED',
  ConnectionLossError: 'CONNECTION_LOSS',
  ClientClosedError: 'CLOSED',
  ProtocolError: 'PROTOCOL',
  UnknownOutcomeError: 'UNKNOWN_OUTCOME',
  ZooKeeperError: 'ZK_NONODE',
  SchemaMissingError: 'SCHEMA_MISSING',
  LockUpgradeError: 'LOCK_UPGRADE',
  LockOrderError: 'LOCK_ORDER',
  AmbiguousLockError: 'AMBIGUOUS_LOCK',
  PermitsMismatchError: 'PERMITS_MISMATCH',
};

const RETRYABLE = new Set<Name>(['LockTimeoutError', 'ConnectionLossError', 'UnknownOutcomeError']);
const NAMES = Object.keys(CODES) as Name[];

describe('error codes and names', () => {
  it.each(NAMES)('%s has its stable code, a literal name and the retryable flag', (name) => {
    const error = samples(errors)[name];
    expect(error.code).toBe(CODES[name]);
    expect(error.name).toBe(name);
    expect(error.retryable).toBe(RETRYABLE.has(name));
    expect(error.stack?.split('\n')[0]).toBe(`${name}: ${error.message}`);
    expect(String(error)).toBe(`${name}: ${error.message}`);
  });

  it('the base class carries any code it is given', () => {
    const error = new FencekeeperError('CONNECTION_LOSS', 'x', { retryable: true });
    expect(error.name).toBe('FencekeeperError');
    expect(error.code).toBe('CONNECTION_LOSS');
    expect(error.retryable).toBe(true);
  });

  it('a default retryable can be overridden, and cause is kept', () => {
    const cause = new Error('socket hang up');
    const error = new ConnectionLossError('lost', { cause, retryable: false });
    expect(error.retryable).toBe(false);
    expect(error.cause).toBe(cause);
    expect(new InvalidTokenError('x').cause).toBeUndefined();
    expect('cause' in new InvalidTokenError('x')).toBe(false);
  });
});

describe('instanceof', () => {
  it.each(NAMES)('%s is an Error, a FencekeeperError and itself, and no other class', (name) => {
    const error = samples(errors)[name];
    expect(error).toBeInstanceOf(Error);
    expect(error).toBeInstanceOf(FencekeeperError);
    for (const other of NAMES) {
      expect(error instanceof errors[other], `${name} instanceof ${other}`).toBe(other === name);
    }
  });

  it('is false for plain errors, look-alikes and primitives', () => {
    for (const value of [new Error('x'), { code: 'STALE_TOKEN', name: 'StaleTokenError' }, null, undefined, 'StaleTokenError', 42]) {
      expect(value instanceof FencekeeperError).toBe(false);
      expect(value instanceof StaleTokenError).toBe(false);
    }
  });

  it('a user subclass without its own kind is still its parents', () => {
    class AccountFenceError extends StaleTokenError {}
    const error = new AccountFenceError('accounts/1', 1n, 2n);
    expect(error).toBeInstanceOf(AccountFenceError);
    expect(error).toBeInstanceOf(StaleTokenError);
    expect(error).toBeInstanceOf(FencekeeperError);
    expect(error).not.toBeInstanceOf(InvalidTokenError);
    expect(error.code).toBe('STALE_TOKEN');
  });

  // Regression: Symbol.hasInstance looked up `this.kind`, which a subclass
  // without its own `kind` inherits, so every plain StaleTokenError passed
  // `instanceof AccountFenceError`.
  it('a parent instance is not an instance of a user subclass without its own kind', () => {
    class AccountFenceError extends StaleTokenError {}
    const plain = new StaleTokenError('accounts/1', 1n, 2n);
    expect(plain).not.toBeInstanceOf(AccountFenceError);
  });

  it('a user subclass with its own kind is told apart from its parent', () => {
    class AccountFenceError extends StaleTokenError {
      static override readonly kind: string = 'AccountFenceError';
    }
    const mine = new AccountFenceError('accounts/1', 1n, 2n);
    const plain = new StaleTokenError('accounts/1', 1n, 2n);
    expect(mine.name).toBe('AccountFenceError');
    expect(mine).toBeInstanceOf(StaleTokenError);
    expect(plain).not.toBeInstanceOf(AccountFenceError);
  });
});

describe('instanceof across two copies of the module', () => {
  // An app and a library that each depend on fencekeeper load two copies of
  // the errors: different class objects, one error vocabulary. With the
  // module registry reset, vitest evaluates errors.ts and every file of
  // src/errors/ it re-exports a second time (a query string on errors.ts
  // alone would copy the re-exporting file and share the classes).
  let copy: Promise<ErrorsModule> | null = null;
  function secondCopy(): Promise<ErrorsModule> {
    copy ??= (async () => {
      vi.resetModules();
      return (await import('../../src/errors.js')) as ErrorsModule;
    })();
    return copy;
  }

  it('really is a second copy', async () => {
    const copy = await secondCopy();
    expect(copy.StaleTokenError).not.toBe(StaleTokenError);
    expect(copy.FencekeeperError).not.toBe(FencekeeperError);
    expect(Object.getPrototypeOf(new copy.StaleTokenError('r', 1n, 2n))).not.toBe(StaleTokenError.prototype);
  });

  it.each(NAMES)('%s from either copy is an instance of the class in the other', async (name) => {
    const copy = await secondCopy();
    const fromCopy = samples(copy)[name];
    const fromHere = samples(errors)[name];
    expect(fromCopy instanceof errors[name]).toBe(true);
    expect(fromHere instanceof copy[name]).toBe(true);
    expect(fromCopy instanceof FencekeeperError).toBe(true);
    expect(fromHere instanceof copy.FencekeeperError).toBe(true);
    for (const other of NAMES) {
      if (other !== name) expect(fromCopy instanceof errors[other], `${name} (copy) instanceof ${other}`).toBe(false);
    }
  });

  it('x instanceof StaleTokenError holds across copies, with its fields intact', async () => {
    const copy = await secondCopy();
    const stale = new copy.StaleTokenError('orders/42', 7n, 11n);
    expect(stale instanceof StaleTokenError).toBe(true);
    expect(stale instanceof InvalidTokenError).toBe(false);
    if (!(stale instanceof StaleTokenError)) throw new Error('unreachable');
    expect(stale.presented).toBe(7n);
    expect(stale.current).toBe(11n);
  });
});

describe('fields', () => {
  it('StaleTokenError: resource, presented, current as bigints', () => {
    const error = new StaleTokenError('accounts/7', 5n, 9n);
    expect(error.resource).toBe('accounts/7');
    expect(error.presented).toBe(5n);
    expect(error.current).toBe(9n);
    expect(error.message).toContain('accounts/7');
    expect(error.message).toContain('5');
    expect(error.message).toContain('9');
    const unknown = new StaleTokenError('accounts/7', 5n, null);
    expect(unknown.current).toBeNull();
    expect(unknown.message).toContain('unknown');
  });

  it('tokens past 2^53 survive in the fields and the message exactly', () => {
    const big = 2n ** 62n + 1n;
    const error = new StaleTokenError('r', big, big + 1n);
    expect(error.presented).toBe(big);
    expect(error.message).toContain('4611686018427387905');
    expect(error.message).toContain('4611686018427387906');
  });

  it('LockLostError: lock and reason', () => {
    for (const reason of ['released', 'deadline', 'session_expired', 'node_deleted', 'renewal_failed', 'closed'] as const) {
      const error = new LockLostError('jobs', reason);
      expect(error.lock).toBe('jobs');
      expect(error.reason).toBe(reason);
      expect(error.message).toContain(reason);
    }
    expect(new LockLostError('jobs', 'deadline', 'custom').message).toBe('custom');
  });

  it('isCode: ours with exactly that code, never a look-alike', () => {
    expect(isCode(new ZooKeeperError('ZK_NONODE', -101, '/a'), 'ZK_NONODE')).toBe(true);
    expect(isCode(new ZooKeeperError('ZK_NONODE', -101, '/a'), 'ZK_NODEEXISTS')).toBe(false);
    expect(isCode(new ConnectionLossError(), 'CONNECTION_LOSS')).toBe(true);
    for (const value of [{ code: 'ZK_NONODE' }, Object.assign(new Error('x'), { code: 'ZK_NONODE' }), null, undefined, 'ZK_NONODE']) {
      expect(isCode(value, 'ZK_NONODE')).toBe(false);
    }
  });

  it('LockTimeoutError: lock and timeoutMs', () => {
    const error = new LockTimeoutError('jobs', 250);
    expect(error.lock).toBe('jobs');
    expect(error.timeoutMs).toBe(250);
    expect(error.message).toContain('250');
  });

  it('ZooKeeperError: the ZK_* code, the raw number and the path', () => {
    const error = new ZooKeeperError('ZK_NODEEXISTS', -110, '/fencekeeper/locks/a');
    expect(error.code).toBe('ZK_NODEEXISTS');
    expect(error.zkCode).toBe(-110);
    expect(error.path).toBe('/fencekeeper/locks/a');
    expect(error.message).toContain('/fencekeeper/locks/a');
    const noPath = new ZooKeeperError('ZK_SESSIONEXPIRED', -112, undefined);
    expect(noPath.path).toBeUndefined();
    expect(noPath.message).not.toContain('undefined');
  });

  it('default messages exist where the constructor allows none', () => {
    expect(new SessionExpiredError().message).toMatch(/expired/);
    expect(new ConnectionLossError().message).toMatch(/lost/);
    expect(new ClientClosedError().message).toMatch(/closed/);
    expect(new InvalidArgumentError('x').message).toBe('x');
    expect(new ProtocolError('p').message).toBe('p');
    expect(new UnknownOutcomeError('u').message).toBe('u');
  });

  it('the kinds brand does not show up in enumeration or JSON', () => {
    const error = new StaleTokenError('r', 1n, 2n);
    expect(Object.getOwnPropertySymbols(error).every((s) => !Object.getOwnPropertyDescriptor(error, s)?.enumerable)).toBe(true);
    expect(Object.keys(error)).not.toContain('kinds');
  });
});
