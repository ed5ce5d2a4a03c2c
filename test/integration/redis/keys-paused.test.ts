// The paused holder, end to end, on a fenced Redis key: a holder process
// takes a Redis lock (FK_REDIS, 2 s TTL), is SIGSTOPped past the TTL, the
// next holder is granted the lock and writes the key with its larger token;
// after SIGCONT the old holder's fencedSet with its old token is refused
// (STALE_TOKEN, carrying the next holder's token) and the key keeps the
// next holder's value. Spawns test/fixtures/redis-key-holder.mjs on the
// built package (npm run build first).
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { acquireLock, fencedGet, fencedSet, readFence } from '../../../adapters/redis/index.js';
import { spawnHolder, type HolderProcess } from '../../../src/testing/index.js';
import { processStopped } from '../../helpers/paused-source-holder.js';
import { uniqueId } from '../../helpers/unique.js';
import { retrying, within } from '../../helpers/wait.js';
import { RedisPool, singleUrl } from './helpers.js';

const FIXTURE = fileURLToPath(new URL('../../fixtures/redis-key-holder.mjs', import.meta.url));
const TTL_MS = 2_000;
const pool = new RedisPool();
const holders: HolderProcess[] = [];
afterAll(async () => {
  await Promise.all(holders.map((h) => h.stop()));
  pool.closeAll();
});

describe('the paused holder on a fenced Redis key', () => {
  it('stopped past its TTL: the next holder writes, and the resumed holder\'s write is refused', async () => {
    const redis = pool.single();
    const name = uniqueId('paused_key');
    const key = `fk-test:${name}`;
    const holder = await spawnHolder(FIXTURE, { env: { ...process.env, FK_REDIS: singleUrl(), FK_LOCK: name, FK_TTL_MS: String(TTL_MS), FK_KEY: key } });
    holders.push(holder);
    const { token: oldToken } = (await within(holder.holding, 60_000, 'the holder\'s grant')) as { token: bigint };
    await holder.pause();
    // Granted only once the stopped holder's key has expired.
    const next = await retrying(() => acquireLock(redis, name, { owner: 'successor', timeoutMs: TTL_MS * 10 + 30_000 }), TTL_MS * 10 + 30_000, 'the successor\'s grant');
    expect(processStopped(holder.pid)).toBe(true);
    expect(next.token > oldToken).toBe(true);
    await fencedSet(redis, key, `from ${next.token}`, next.token);
    holder.send('write');
    holder.resume();
    const report = (await within(holder.next(), 60_000, 'the resumed holder\'s report')) as { held: boolean; token: bigint; outcome: unknown };
    expect(report.token).toBe(oldToken);
    expect(report.held).toBe(false);
    expect(report.outcome).toEqual({ code: 'STALE_TOKEN', current: next.token });
    expect(await fencedGet(redis, key)).toEqual({ value: `from ${next.token}`, token: next.token });
    expect(await readFence(redis, key)).toBe(next.token);
    await next.release();
    holder.send('exit');
    await within(holder.exited, 30_000, 'the holder to exit');
  }, 180_000);
});
