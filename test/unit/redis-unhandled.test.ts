// Edge cases of fencekeeper/redis's promises that real servers do not
// produce on demand, on fake clients: a command that fails after it lost its
// timeout race, a client that throws instead of rejecting, and the wake
// subscriber asked without ioredis's own resubscribe (which leaves a promise
// nobody handles: test/integration/redis/robustness.test.ts shows it on a
// real paused node). Unhandled rejections are counted; vitest fails on one too.
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import { ConnectionLossError } from '../../src/errors.js';
import { NodeTimeoutError, send, type RedisClient, type RedisSubscriber } from '../../src/shared/redis/client.js';
import { wakeChannel } from '../../src/sources/redis/wake.js';
import { countUnhandledRejections } from '../helpers/unhandled.js';

const unhandled = countUnhandledRejections();
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 20));

describe('send', () => {
  it('a command that fails after its timeout: the caller has the timeout, the late failure is handled', async () => {
    let fail: (error: Error) => void = () => {};
    const client = { call: () => new Promise((_, reject) => (fail = reject)), duplicate: () => ({}) } as unknown as RedisClient;
    const error = await send(client, 'h:1', 'GET', ['k'], 5).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NodeTimeoutError);
    expect((error as ConnectionLossError).code).toBe('CONNECTION_LOSS');
    fail(new Error('Connection is closed.'));
    await settle();
    expect(unhandled.reasons).toEqual([]);
  });

  it('a client whose call throws: ConnectionLossError with the cause, no timer left to fire', async () => {
    const thrown = new Error('Connection is closed.');
    const client = {
      call: () => {
        throw thrown;
      },
      duplicate: () => ({}),
    } as unknown as RedisClient;
    const error = await send(client, 'h:1', 'GET', ['k'], 5).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect(error).not.toBeInstanceOf(NodeTimeoutError);
    expect((error as Error).message).toBe('Redis at h:1: Connection is closed.');
    expect((error as Error).cause).toBe(thrown);
    await settle();
    expect(unhandled.reasons).toEqual([]);
  });
});

describe('send: a script the server does not know (NOSCRIPT)', () => {
  const noScript = (): Error => new Error('NOSCRIPT No matching script. Please use EVAL.');

  it('is sent once more with EVAL and its text, on the same promise', async () => {
    const calls: Array<[string, unknown[]]> = [];
    const client = {
      call: (command: string, args: unknown[]) => {
        calls.push([command, args]);
        return command === 'evalsha' ? Promise.reject(noScript()) : Promise.resolve(7);
      },
      duplicate: () => ({}),
    } as unknown as RedisClient;
    expect(await send(client, 'h:1', 'evalsha', ['abc', 1, 'k', 'v'], 1000, 'return 7')).toBe(7);
    expect(calls).toEqual([
      ['evalsha', ['abc', 1, 'k', 'v']],
      ['eval', ['return 7', 1, 'k', 'v']],
    ]);
  });

  it('twice: the second NOSCRIPT is the error (no loop)', async () => {
    const commands: string[] = [];
    const client = {
      call: (command: string) => {
        commands.push(command);
        return Promise.reject(noScript());
      },
      duplicate: () => ({}),
    } as unknown as RedisClient;
    const error = await send(client, 'h:1', 'evalsha', ['abc', 0], 1000, 'return 1').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConnectionLossError);
    expect(commands).toEqual(['evalsha', 'eval']);
  });

  it('after the timeout: the caller has the timeout, and nothing more is sent', async () => {
    let fail: (error: Error) => void = () => {};
    const commands: string[] = [];
    const client = {
      call: (command: string) => {
        commands.push(command);
        return new Promise((_, reject) => (fail = reject));
      },
      duplicate: () => ({}),
    } as unknown as RedisClient;
    const error = await send(client, 'h:1', 'evalsha', ['abc', 0], 5, 'return 1').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NodeTimeoutError);
    fail(noScript());
    await settle();
    expect(commands).toEqual(['evalsha']);
    expect(unhandled.reasons).toEqual([]);
  });
});

/** A subscriber that records its SUBSCRIBEs, each answered by the test. */
class FakeSubscriber extends EventEmitter {
  readonly subscribes: Array<{ resolve: () => void; reject: (e: Error) => void }> = [];
  disconnected = false;
  subscribe(): Promise<unknown> {
    return new Promise((resolve, reject) => this.subscribes.push({ resolve: () => resolve(1), reject }));
  }
  disconnect(): void {
    this.disconnected = true;
    // as ioredis does: what is pending is rejected when the connection closes
    for (const s of this.subscribes.splice(0)) s.reject(new Error('Connection is closed.'));
  }
}

describe('the wake subscriber', () => {
  it('is asked for without autoResubscribe, subscribes again itself after a reconnect, and its rejected SUBSCRIBE is handled', async () => {
    const overrides: unknown[] = [];
    const subscriber = new FakeSubscriber();
    const client: RedisClient = {
      call: () => Promise.resolve(1),
      duplicate: (override) => {
        overrides.push(override);
        return subscriber as unknown as RedisSubscriber;
      },
    };
    const channel = wakeChannel(client);
    const joining = channel.join('a', () => {}, 1000, 100);
    expect(subscriber.subscribes).toHaveLength(1);
    subscriber.subscribes.shift()!.resolve();
    const ticket = await joining;
    expect(overrides).toEqual([{ autoResubscribe: false }]);

    // The connection drops and comes back: one SUBSCRIBE of ours, left unanswered.
    subscriber.emit('close');
    subscriber.emit('ready');
    expect(subscriber.subscribes).toHaveLength(1);
    // The last waiter leaves: the subscriber closes, its SUBSCRIBE rejects.
    ticket.leave();
    expect(subscriber.disconnected).toBe(true);
    await settle();
    expect(unhandled.reasons).toEqual([]);
  });

  it('a ready without a lost connection before it (the first one) subscribes nothing more', async () => {
    const subscriber = new FakeSubscriber();
    const client: RedisClient = { call: () => Promise.resolve(1), duplicate: () => subscriber as unknown as RedisSubscriber };
    const joining = wakeChannel(client).join('b', () => {}, 1000, 100);
    subscriber.emit('ready');
    expect(subscriber.subscribes).toHaveLength(1);
    subscriber.subscribes.shift()!.resolve();
    (await joining).leave();
    await settle();
    expect(unhandled.reasons).toEqual([]);
  });

  it('a first SUBSCRIBE refused before the connection is ready (enableOfflineQueue: false) is asked again at ready, and the join waits for it', async () => {
    const subscriber = new FakeSubscriber();
    const client: RedisClient = { call: () => Promise.resolve(1), duplicate: () => subscriber as unknown as RedisSubscriber };
    let joined = false;
    const joining = wakeChannel(client)
      .join('c', () => {}, 60_000, 100)
      .then((ticket) => {
        joined = true;
        return ticket;
      });
    subscriber.subscribes.shift()!.reject(new Error("Stream isn't writeable and enableOfflineQueue options is false"));
    await settle();
    expect(joined).toBe(false);
    subscriber.emit('ready');
    expect(subscriber.subscribes).toHaveLength(1);
    subscriber.subscribes.shift()!.resolve();
    (await joining).leave();
    expect(joined).toBe(true);
    await settle();
    expect(unhandled.reasons).toEqual([]);
  });
});
