// Fence stores at scale: admissions/s vs the number of resources. K loops (the
// concurrency of a busy server) each admit token 1 to one of R resources picked at
// random (the same holder again: equal tokens pass) and commit at once. Every
// resource is admitted once before the clock runs (its row / key / map entry exists).
// Beside each store, its floor at the same concurrency: MemoryFenceStore against an
// awaited no-op, PostgresFenceStore against `SELECT 1` on the same pool, RedisFenceStore
// against PING on the same client (one round trip with no work: a store's admission
// cannot be cheaper).
import { Redis } from 'ioredis';
import type pg from 'pg';
import { MemoryFenceStore } from '../../../src/shared/http/memory-fence-store.js';
import { PostgresFenceStore } from '../../../adapters/postgres/fence/store.js';
import { RedisFenceStore } from '../../../adapters/redis/store.js';
import type { FenceStore } from '../../../src/fence.js';
import { closedLoop, median } from '../closed-loop.js';
import { pgPool, servers } from './sources.js';

export const STORES = ['memory', 'postgres', 'redis'] as const;
export type StoreName = (typeof STORES)[number];

export interface StorePoint {
  readonly store: StoreName;
  readonly resources: number;
  readonly admissionsPerSecond: number;
  readonly floorPerSecond: number;
}

export interface OpenedStore {
  readonly store: FenceStore<unknown>;
  floor(): Promise<void>;
  close(): Promise<void>;
}

export function openStore(name: StoreName, schema: string, concurrency: number): OpenedStore {
  switch (name) {
    case 'memory':
      return { store: new MemoryFenceStore() as FenceStore<unknown>, floor: () => Promise.resolve(), close: async () => undefined };
    case 'postgres': {
      const pool: pg.Pool = pgPool(schema, Math.min(concurrency, 8));
      return { store: new PostgresFenceStore(pool) as FenceStore<unknown>, floor: async () => void (await pool.query('SELECT 1')), close: () => pool.end() };
    }
    case 'redis': {
      const m = /^redis:\/\/([^:/]+):(\d+)$/.exec(servers.redis)!;
      const c = new Redis({ host: m[1]!, port: Number(m[2]) });
      return { store: new RedisFenceStore(c) as FenceStore<unknown>, floor: async () => void (await c.ping()), close: async () => c.disconnect() };
    }
  }
}

export async function storeAt(opened: OpenedStore, name: StoreName, resources: number, o: { concurrency: number; blockMs: number; rounds: number; tag: string }): Promise<StorePoint> {
  const names = Array.from({ length: resources }, (_, i) => `${o.tag}/${name}/${resources}/${i}`);
  for (let i = 0; i < names.length; i += 200) {
    await Promise.all(names.slice(i, i + 200).map(async (r) => (await opened.store.admit(r, 1n)).commit()));
  }
  const admit = async (): Promise<void> => {
    const admission = await opened.store.admit(names[Math.floor(Math.random() * resources)]!, 1n);
    await admission.commit();
  };
  const rates: number[] = [];
  const floors: number[] = [];
  for (let round = 0; round < o.rounds; round++) {
    // Alternating order, so a burst of load elsewhere falls on both alike.
    if (round % 2 === 0) {
      rates.push((await closedLoop(o.concurrency, o.blockMs, admit)).rate);
      floors.push((await closedLoop(o.concurrency, o.blockMs, () => opened.floor())).rate);
    } else {
      floors.push((await closedLoop(o.concurrency, o.blockMs, () => opened.floor())).rate);
      rates.push((await closedLoop(o.concurrency, o.blockMs, admit)).rate);
    }
  }
  return { store: name, resources, admissionsPerSecond: median(rates), floorPerSecond: median(floors) };
}
