// A command's node timeout (src/shared/redis/client.ts send) against the real
// single instance of FK_REDIS: a reply that reached this process while it was
// busy past the timeout (a GC pause, a burst of replies to handle, a machine
// short of CPU) is a reply in time, and only a server that has not answered
// times the command out. The first failed the scale bench's 100,000-lock
// point and, from one stall of a test process, made all five Redlock nodes
// "not answer" at once.
import { afterEach, describe, expect, it } from 'vitest';
import { performance } from 'node:perf_hooks';
import { NodeTimeoutError, send, where } from '../../../src/shared/redis/client.js';
import { RedisPool, holdRedisFaultsForFile } from './helpers.js';

const pool = new RedisPool();
afterEach(() => pool.closeAll());
// The single instance must answer (the second case makes it busy itself): no other file's node faults meanwhile.
holdRedisFaultsForFile();

/** This process busy for `ms`, as a long GC pause or a long handler would keep it: no timer, no I/O runs. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spin
  }
}

describe('a node timeout', () => {
  it('a reply that arrived while this process was busy past the timeout counts: the command resolves', async () => {
    const c = pool.single();
    await c.ping();
    // Written to the socket now; the server answers within the busy second, the reply waits in the socket.
    const replies = [send(c, where(c), 'ping', [], 50), send(c, where(c), 'echo', ['second'], 50)];
    busy(1000);
    expect(await Promise.all(replies)).toEqual(['PONG', 'second']);
  });

  it('a server that has not answered times the command out (its own stall, not ours)', async () => {
    const c = pool.single();
    const other = pool.single();
    await Promise.all([c.ping(), other.ping()]);
    // The server itself busy for a second (DEBUG SLEEP on another connection): nothing can answer in 100 ms.
    const sleeping = other.call('debug', ['sleep', '1']);
    await new Promise((r) => setTimeout(r, 20));
    await expect(send(c, where(c), 'ping', [], 100)).rejects.toBeInstanceOf(NodeTimeoutError);
    await sleeping;
  });
});
