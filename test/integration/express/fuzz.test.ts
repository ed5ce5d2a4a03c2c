// Thousands of hostile token headers, sent as raw bytes over a socket so that
// nothing is normalised by a client on the way: only 200/400/409/428 come
// back, never a 500, and a refused request never moves the fence. Run with
// MemoryFenceStore, PostgresFenceStore and RedisFenceStore (fewer runs: each
// admission is a round trip, and the whole suite shares two cores).
import { express } from './variants.js';
import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencing, MemoryFenceStore } from '../../../adapters/express/index.js';
import { migrate, PostgresFenceStore } from '../../../adapters/postgres/index.js';
import { Redis } from 'ioredis';
import { RedisFenceStore } from '../../../adapters/redis/index.js';
import { hostPort, singleUrl } from '../redis/helpers.js';
import { MAX_TOKEN, parseToken, type FenceStore, type FencingToken } from '../../../src/index.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueId } from '../../helpers/unique.js';
import { rawStatus, serve, SettlingStore, type Served } from './helpers.js';


/** What the server's parser leaves of a value: latin1 text, optional whitespace (SP, HTAB) trimmed. */
function serverSees(bytes: Buffer): string {
  let start = 0;
  let end = bytes.length;
  while (start < end && (bytes[start] === 0x20 || bytes[start] === 0x09)) start++;
  while (end > start && (bytes[end - 1] === 0x20 || bytes[end - 1] === 0x09)) end--;
  return bytes.subarray(start, end).toString('latin1');
}

/** Control characters other than HTAB: Node's parser refuses the request (its own 400). */
function hasControl(bytes: Buffer): boolean {
  return bytes.some((b) => (b < 0x20 && b !== 0x09) || b === 0x7f);
}

function tokenOf(text: string): FencingToken | undefined {
  try {
    return parseToken(text);
  } catch {
    return undefined;
  }
}

const text = fc.oneof(
  fc.bigInt({ min: 1n, max: MAX_TOKEN }).map(String),
  fc.bigInt({ min: 1n, max: 300n }).map(String),
  fc.bigInt({ min: MAX_TOKEN + 1n, max: 10n ** 40n }).map(String),
  fc.constantFrom('', ' ', '\t', '0', '-0', '+1', '-1', '0x1f', '0X1F', '1e3', '1E3', '1.0', '.5', '1_000', 'Infinity', 'NaN',
    '１２', '٣٤', '३४', '١', '12 34', '34,35', '34, 34', '\u00b2', '\u00b9\u00b2', '9223372036854775807', '9223372036854775808',
    '09223372036854775807', '18446744073709551615', '-9223372036854775808', '0000000000000000001'),
  fc.tuple(fc.constantFrom('', ' ', '\t', '  \t'), fc.bigInt({ min: 1n, max: 300n }).map(String), fc.constantFrom('', ' ', '\t', ' \t ')).map(
    ([before, token, after]) => before + token + after,
  ),
  fc.tuple(fc.constantFrom('+', '-', '0', '00', ' +', '0x', '0b', '0o'), fc.bigInt({ min: 0n, max: 1000n })).map(([prefix, n]) => prefix + String(n)),
  fc.tuple(fc.bigInt({ min: 1n, max: 300n }), fc.constantFrom('e0', 'e1', 'n', '.0', ' ', 'x', ',1', ';')).map(([n, suffix]) => String(n) + suffix),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: fc.constantFrom('0', '1', '9', ' ', '-', '+', 'e', 'x', '.', '\t'), maxLength: 30 }),
  fc.integer({ min: 20, max: 5000 }).map((n) => '9'.repeat(n)),
  fc.integer({ min: 19, max: 5000 }).map((n) => `1${'0'.repeat(n)}`),
);

/** One header occurrence's value as bytes: text as UTF-8 (most), or arbitrary bytes. */
const value = fc
  .oneof(
    { weight: 8, arbitrary: text.map((t) => Buffer.from(t, 'utf8')) },
    { weight: 1, arbitrary: text.map((t) => Buffer.from(t, 'latin1')) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 24 }).map((a) => Buffer.from(a)) },
  )
  // CR and LF would end the header line: that is a different request, not a value.
  .filter((bytes) => !bytes.includes(0x0d) && !bytes.includes(0x0a));

const name = fc.constantFrom('fencing-token', 'Fencing-Token', 'FENCING-TOKEN', 'fEnCiNg-ToKeN');

const occurrences = fc
  .oneof(
    { weight: 1, arbitrary: fc.constant([] as { name: string; value: Buffer }[]) },
    { weight: 6, arbitrary: fc.tuple(fc.record({ name, value })).map((one) => [...one]) },
    { weight: 2, arbitrary: fc.array(fc.record({ name, value }), { minLength: 2, maxLength: 3 }) },
  )
  // Stay under Node's 16 KiB header limit (else its own 431, not ours to test).
  .filter((list) => list.reduce((sum, o) => sum + o.name.length + o.value.length + 4, 0) < 14_000);

interface FuzzedStore {
  readonly name: string;
  readonly numRuns: number;
  open(): Promise<{ store: FenceStore<unknown>; close(): Promise<void> }>;
}

const STORES: readonly FuzzedStore[] = [
  { name: 'MemoryFenceStore', numRuns: 3000, open: async () => ({ store: new MemoryFenceStore(), close: async () => undefined }) },
  {
    name: 'PostgresFenceStore',
    numRuns: 400,
    open: async () => {
      const schema = uniqueId('fk_fuzz');
      const pool = new pg.Pool({ connectionString: testServers().databaseUrl, max: 4, options: `-c search_path=${schema}` });
      await pool.query(`CREATE SCHEMA ${schema}`);
      await migrate(pool);
      return {
        store: new PostgresFenceStore(pool),
        close: async () => {
          await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
          await pool.end();
        },
      };
    },
  },
  {
    name: 'RedisFenceStore',
    numRuns: 400,
    open: async () => {
      const redis = new Redis(hostPort(singleUrl()));
      // A fresh prefix per run: the fuzzed resources' marks must start empty (they never expire).
      const prefix = uniqueId('fk_fuzz');
      const store = new RedisFenceStore(redis);
      const scoped: FenceStore<unknown> = {
        admit: (resource, token, options) => store.admit(`${prefix}:${resource}`, token, options).then((a) => ({ ...a, resource, commit: () => a.commit(), abort: () => a.abort() })),
        current: (resource) => store.current(`${prefix}:${resource}`),
      };
      return { store: scoped, close: async () => redis.disconnect() };
    },
  },
];

describe.each(STORES)('fencing() under fuzzed token headers, $name', ({ numRuns, open }) => {
  let served: Served;
  let store: SettlingStore<unknown>;
  let closeStore: () => Promise<void>;
  beforeAll(async () => {
    const opened = await open();
    closeStore = opened.close;
    // The response goes out before the store commits: SettlingStore.idle() waits
    // for the commit, so the mark read next is the one this request left.
    store = new SettlingStore(opened.store);
    const app = express();
    // Many resources, so that both fresh fences (admissions) and high ones (409s) keep coming.
    app.post('/fuzz/:n', fencing({ store, resource: (req) => `fuzzed:${String(req.params['n'])}` }), (_req, res) => {
      res.json({ ok: true });
    });
    served = await serve(app);
  });
  afterAll(async () => {
    await served?.close();
    await closeStore?.();
  });

  it('answers only 200/400/409/428, never 500, and only an admission moves the fence', async () => {
    const seen = new Map<number, number>();
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 99 }), occurrences, async (n, list) => {
        const resource = `fuzzed:${n}`;
        const before = await store.current(resource);
        const lines = list.map((o) => Buffer.concat([Buffer.from(`${o.name}: `, 'latin1'), o.value]));
        const answer = await rawStatus(served.port, `/fuzz/${n}`, lines);
        seen.set(answer.status, (seen.get(answer.status) ?? 0) + 1);
        await store.idle();
        const after = await store.current(resource);

        expect([200, 400, 409, 428]).toContain(answer.status);
        if (list.length === 0) {
          expect(answer.status).toBe(428);
        } else if (list.length > 1) {
          expect(answer.status).toBe(400);
        } else {
          const bytes = list[0]!.value;
          const token = hasControl(bytes) ? undefined : tokenOf(serverSees(bytes));
          if (token === undefined) {
            expect(answer.status).toBe(400);
          } else if (before !== null && token < before) {
            expect(answer.status).toBe(409);
            expect(JSON.parse(answer.body)).toMatchObject({ presented: String(token), current: String(before) });
          } else {
            expect(answer.status).toBe(200);
            expect(after).toBe(token);
          }
        }
        if (answer.status !== 200) expect(after).toBe(before);
      }),
      { numRuns },
    );
    // The generators reach every branch, not just the 400s (20 of each in 3000 runs).
    for (const status of [200, 400, 409, 428]) expect(seen.get(status) ?? 0).toBeGreaterThan(Math.floor(numRuns / 150));
  });
});
