// Tokens across a ZooKeeper leader failover in the 3-node ensemble: an
// acquire/release loop runs while the leader is SIGKILLed; every token is
// larger than the one before, and the ones after the kill carry a larger
// epoch (czxid >> 32). The killed node is restarted afterwards.
import { describe, expect, it } from 'vitest';
import { acquireLock } from '../../../src/sources/zookeeper/recipes/lock.js';
import type { FencingToken } from '../../../src/token.js';
import { killEnsembleLeader, testServers, useEnsembleForFaults, waitEnsembleHealthy } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';
import { ClientPool } from '../../helpers/zookeeper.js';

const clients = new ClientPool();
// Other files kill leaders too: one file at a time.
useEnsembleForFaults(() => clients.closeAll());

const epochOf = (token: FencingToken): bigint => token >> 32n;

describe('leader failover', () => {
  it('tokens keep increasing across a leader SIGKILL, and the epoch grows', async () => {
    await waitEnsembleHealthy();
    const name = uniqueLockName('failover');
    // Long enough to ride out the election (tickTime 500 ms).
    const zk = await clients.connect(testServers().zkEnsemble, 10_000);
    const tokens: FencingToken[] = [];
    let killed = false;
    let afterKill = 0;
    const loop = (async () => {
      while (afterKill < 20) {
        const lock = await acquireLock(zk, name);
        tokens.push(lock.token);
        if (killed) afterKill++;
        await lock.release();
      }
    })();
    while (tokens.length < 20) await new Promise((r) => setTimeout(r, 5));
    const before = tokens.at(-1)!;
    const leader = await killEnsembleLeader();
    killed = true;
    await loop;
    expect([1, 2, 3]).toContain(leader);
    for (let i = 1; i < tokens.length; i++) expect(tokens[i]! > tokens[i - 1]!, `token ${i}`).toBe(true);
    const last = tokens.at(-1)!;
    expect(epochOf(last)).toBeGreaterThan(epochOf(before));
    console.log(`failover: ${tokens.length} grants; last before the kill 0x${before.toString(16)}, last after 0x${last.toString(16)}`);
  });
});
