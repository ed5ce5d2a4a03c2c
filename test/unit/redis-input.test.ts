// Bad input to fencekeeper/redis is refused with InvalidArgumentError before
// any command reaches a server: the fake clients below record every command
// they are given, and must have been given none.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { acquireLock, lockStatus, redisSource, tryAcquireLock, type RedisClient, type RedisTarget } from '../../src/sources/redis/index.js';
import { REDIS_SERVICE, REDLOCK_SERVICE } from '../../src/cli/services/redis.js';
import { UsageError } from '../../src/cli/args.js';
import type { LockServiceContext } from '../../src/cli/lock-service.js';
import { checkName } from '../../src/sources/redis/options.js';
import { lockKeys } from '../../src/sources/redis/scripts.js';

function fake(sent: string[]): RedisClient {
  return {
    call: (command) => {
      sent.push(command);
      return Promise.reject(new Error('a fake client answers nothing'));
    },
    duplicate: () => {
      sent.push('duplicate');
      throw new Error('no subscriber in a fake');
    },
  };
}

describe('what an acquire remembers of the name it was given last', () => {
  it('a name accepted before lets no other through unchecked', () => {
    expect(checkName('good')).toBe('good');
    expect(checkName('good')).toBe('good');
    expect(() => checkName('go od')).toThrow(InvalidArgumentError);
    expect(() => checkName('')).toThrow(InvalidArgumentError);
    expect(() => checkName('good\n')).toThrow(InvalidArgumentError);
  });

  it('the keys are always the asked name\'s', () => {
    expect(lockKeys('x')).toEqual(['fencekeeper:lock:{x}', 'fencekeeper:token:{x}', 'fencekeeper:waiters:{x}']);
    expect(lockKeys('x')).toEqual(['fencekeeper:lock:{x}', 'fencekeeper:token:{x}', 'fencekeeper:waiters:{x}']);
    expect(lockKeys('y')).toEqual(['fencekeeper:lock:{y}', 'fencekeeper:token:{y}', 'fencekeeper:waiters:{y}']);
    expect(lockKeys('x')[2]).toBe('fencekeeper:waiters:{x}');
  });
});

describe('refused before any command', () => {
  const sent: string[] = [];
  const one = fake(sent);
  const three = [fake(sent), fake(sent), fake(sent)];

  const cases: Array<[string, () => Promise<unknown>]> = [
    ['ttl 0', () => acquireLock(one, 'a', { ttlMs: 0 })],
    ['ttl negative', () => acquireLock(one, 'a', { ttlMs: -5 })],
    ['ttl not an integer', () => acquireLock(one, 'a', { ttlMs: 1.5 })],
    ['ttl NaN', () => tryAcquireLock(one, 'a', { ttlMs: Number.NaN })],
    ['ttl beyond a timer\'s range (2^31 ms)', () => acquireLock(one, 'a', { ttlMs: 2 ** 31 })],
    ['margin equal to the ttl', () => acquireLock(one, 'a', { ttlMs: 1000, safetyMarginMs: 1000 })],
    ['margin above the ttl', () => acquireLock(one, 'a', { ttlMs: 1000, safetyMarginMs: 5000 })],
    ['negative margin', () => acquireLock(one, 'a', { safetyMarginMs: -1 })],
    ['node timeout not below the ttl', () => acquireLock(three, 'a', { ttlMs: 100, nodeTimeoutMs: 100 })],
    ['negative timeout', () => acquireLock(one, 'a', { timeoutMs: -1 })],
    ['empty name', () => acquireLock(one, '')],
    ['name with a space', () => acquireLock(one, 'a b')],
    ['name with a brace', () => acquireLock(one, 'a{b}')],
    ['name with a newline', () => tryAcquireLock(one, 'a\nb')],
    ['name too long', () => acquireLock(one, 'x'.repeat(513))],
    ['name not a string', () => acquireLock(one, 42 as unknown as string)],
    ['name with a lone high surrogate', () => acquireLock(one, 'a\ud800')],
    ['name with a lone low surrogate', () => tryAcquireLock(three, '\udc00b')],
    ['status of a name with a lone surrogate', () => lockStatus(one, '\ud800')],
    ['empty owner', () => acquireLock(one, 'a', { owner: '' })],
    ['owner with a control character', () => acquireLock(one, 'a', { owner: 'a\u0007b' })],
    ['signal not an AbortSignal', () => acquireLock(one, 'a', { signal: {} as AbortSignal })],
    ['no client', () => acquireLock(null as unknown as RedisTarget, 'a')],
    ['not a client', () => acquireLock({} as RedisTarget, 'a')],
    ['Redlock with 2 clients', () => acquireLock([fake(sent), fake(sent)], 'a')],
    ['Redlock with an empty array', () => acquireLock([], 'a')],
    ['Redlock with the same client twice', () => acquireLock([three[0]!, three[1]!, three[0]!], 'a')],
    ['Redlock with a non-client', () => acquireLock([three[0]!, three[1]!, {} as RedisClient], 'a')],
    ['status of a bad name', () => lockStatus(one, 'a b')],
  ];

  it.each(cases)('%s', async (_what, call) => {
    const error = await call().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).code).toBe('INVALID_ARGUMENT');
    expect(sent).toEqual([]);
  });

  it('redisSource checks its settings when it is made', () => {
    expect(() => redisSource(one, { ttlMs: 0 })).toThrow(InvalidArgumentError);
    expect(() => redisSource(one, { ttlMs: 30 * 24 * 3600 * 1000 })).toThrow(/at most 2147483647/);
    expect(() => redisSource([three[0]!, three[0]!, three[1]!])).toThrow(InvalidArgumentError);
    expect(() => redisSource(three, { ttlMs: 100, nodeTimeoutMs: 200 })).toThrow(InvalidArgumentError);
    expect(sent).toEqual([]);
  });
});

describe('the CLI\'s redis:// and redlock:// URLs', () => {
  const context = (fromCommandLine: boolean, values: Record<string, string> = {}): LockServiceContext => ({
    origin: fromCommandLine ? '--lock-service' : 'FENCEKEEPER_LOCK_SERVICE',
    fromCommandLine,
    values,
    env: {},
  });

  it('takes host:port, a database, hosts lists for Redlock', () => {
    expect(REDIS_SERVICE.address('127.0.0.1:6390', context(true)).description).toBe('Redis at 127.0.0.1:6390');
    expect(REDIS_SERVICE.address('localhost:6390/3', context(true)).description).toBe('Redis at localhost:6390');
    expect(REDLOCK_SERVICE.address('a:1,b:2,c:3', context(true)).description).toBe('Redlock over a:1,b:2,c:3');
    expect(REDIS_SERVICE.address('user:secret@h:1', context(false)).description).toBe('Redis at h:1');
  });

  it.each([
    ['a password on the command line', REDIS_SERVICE, 'user:secret@h:1', /FENCEKEEPER_LOCK_SERVICE only/],
    ['a password on the command line (Redlock)', REDLOCK_SERVICE, ':secret@a:1,b:2,c:3', /FENCEKEEPER_LOCK_SERVICE only/],
    ['no port', REDIS_SERVICE, 'h', /host:port/],
    ['a bad port', REDIS_SERVICE, 'h:70000', /host:port/],
    ['two hosts for redis://', REDIS_SERVICE, 'a:1,b:2', /redlock:\/\//],
    ['two nodes for Redlock', REDLOCK_SERVICE, 'a:1,b:2', /at least 3/],
    ['one node twice', REDLOCK_SERVICE, 'a:1,b:2,a:1', /same node twice/],
    ['a query', REDIS_SERVICE, 'h:1?x=1', /no query/],
    ['a bad database', REDIS_SERVICE, 'h:1/x', /database/],
  ])('refuses %s', (_what, service, rest, message) => {
    expect(() => service.address(rest, context(true))).toThrow(UsageError);
    expect(() => service.address(rest, context(true))).toThrow(message);
  });

  it('checks names and refuses elections without connecting', () => {
    const address = REDIS_SERVICE.address('h:1', context(true));
    expect(() => address.checkName('lock', 'jobs/reindex')).not.toThrow();
    expect(() => address.checkName('lock', 'a b')).toThrow(UsageError);
    expect(() => address.checkName('lock', 'jobs/\ud800')).toThrow(UsageError);
    expect(() => address.checkName('lock', 'jobs/\ud83d\udd12')).not.toThrow();
    expect(() => address.checkName('election', 'leader')).toThrow(/no elections/);
  });
});
