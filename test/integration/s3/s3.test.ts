// fencekeeper/s3 against a real S3 server (Ceph RGW 16 in CI): fenced writes
// through conditional PUTs. Every test works under its own random key prefix in
// one bucket per file, removed in afterAll.
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GetObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import type { S3Client } from '@aws-sdk/client-s3';
import { InvalidArgumentError, InvalidTokenError, RepeatedBodyError, StaleTokenError, UnknownOutcomeError } from '../../../src/index.js';
import {
  fencedDeleteObject,
  fencedGetObject,
  fencedPutObject,
  isTombstone,
  readFence,
} from '../../../adapters/s3/index.js';
import { TestBucket, expectRejects, loseReplies, newClient, randomPrefix as prefix } from './helpers.js';

const testBucket = new TestBucket('s3');
const bucket = testBucket.name;
const admin = testBucket.admin;
const getRaw = (Key: string) => testBucket.raw(Key);
const exists = (Key: string) => testBucket.exists(Key);

beforeAll(() => testBucket.create());
afterAll(() => testBucket.remove());

describe('fencedPutObject', () => {
  it('creates with If-None-Match, stores the token, and the steady state costs one request', async () => {
    const Key = `${prefix()}/obj`;
    const { client, seen } = newClient();
    const first = await fencedPutObject(client, { Bucket: bucket, Key, Body: 'v1', token: 35n });
    expect(first.token).toBe(35n);
    expect(seen.map((r) => r.method)).toEqual(['HEAD', 'PUT']);
    expect(seen[1]!.headers['if-none-match']).toBe('*');
    expect(seen[1]!.headers['x-amz-meta-fencing-token']).toBe('35');
    expect(await readFence(client, { Bucket: bucket, Key })).toBe(35n);

    seen.length = 0;
    const second = await fencedPutObject(client, { Bucket: bucket, Key, Body: 'v2', token: 35n });
    // The steady state: one conditional PUT, no HEAD; the ETag goes out unquoted (RGW needs it so).
    expect(seen.map((r) => r.method)).toEqual(['PUT']);
    expect(seen[0]!.headers['if-match']).toBe(first.etag.replaceAll('"', ''));
    expect(seen[0]!.headers['if-match']).not.toContain('"');

    seen.length = 0;
    // A larger token: the lock changed hands, someone else may have written
    // since, so the fence is read first (HEAD + PUT, never a doomed PUT first).
    await fencedPutObject(client, { Bucket: bucket, Key, Body: Buffer.from('v3'), token: 36n });
    expect(seen.map((r) => r.method)).toEqual(['HEAD', 'PUT']);
    expect(seen[1]!.headers['if-match']).toBe(second.etag.replaceAll('"', ''));
    const raw = await getRaw(Key);
    expect(raw.body).toBe('v3');
    expect(raw.metadata['fencing-token']).toBe('36');
    client.destroy();
  });

  it('keeps the user metadata and other PutObject fields', async () => {
    const Key = `${prefix()}/meta`;
    const { client } = newClient();
    await fencedPutObject(client, {
      Bucket: bucket, Key, Body: new TextEncoder().encode('{"a":1}'), token: 7n,
      ContentType: 'application/json', Metadata: { owner: 'billing' },
    });
    const out = await admin.send(new HeadObjectCommand({ Bucket: bucket, Key }));
    expect(out.ContentType).toBe('application/json');
    expect(out.Metadata).toMatchObject({ owner: 'billing', 'fencing-token': '7' });
    client.destroy();
  });

  it('refuses a stale token: 35 writes, 34 is refused, the object keeps 35', async () => {
    const Key = `${prefix()}/stale`;
    const holder35 = newClient();
    const holder34 = newClient();
    await fencedPutObject(holder35.client, { Bucket: bucket, Key, Body: 'by 35', token: 35n });

    const error = await expectRejects(
      fencedPutObject(holder34.client, { Bucket: bucket, Key, Body: 'by 34', token: 34n }),
      StaleTokenError,
    );
    expect(error.presented).toBe(34n);
    expect(error.current).toBe(35n);
    expect(error.resource).toBe(`s3://${bucket}/${Key}`);
    expect(holder34.seen.map((r) => r.method)).toEqual(['HEAD']); // refused before any PUT

    // The same client (its cache says 35) refuses 34 without a request at all.
    holder35.seen.length = 0;
    await expectRejects(fencedPutObject(holder35.client, { Bucket: bucket, Key, Body: 'by 34', token: 34n }), StaleTokenError);
    expect(holder35.seen).toEqual([]);

    const raw = await getRaw(Key);
    expect(raw.body).toBe('by 35');
    expect(raw.metadata['fencing-token']).toBe('35');
    holder35.client.destroy();
    holder34.client.destroy();
  });

  it('the race that matters: 34 reads, is held, 35 writes, 34 resumes and is refused', async () => {
    const Key = `${prefix()}/race`;
    const setup = newClient();
    await fencedPutObject(setup.client, { Bucket: bucket, Key, Body: 'by 33', token: 33n });

    const holder34 = newClient();
    const holder35 = newClient();
    let reachedPut!: () => void;
    const atPut = new Promise<void>((resolve) => { reachedPut = resolve; });
    let resume!: () => void;
    const held = new Promise<void>((resolve) => { resume = resolve; });
    let holds = 0;
    const write34 = fencedPutObject(holder34.client, { Bucket: bucket, Key, Body: 'by 34', token: 34n }, {
      beforePut: async () => {
        holds += 1;
        if (holds === 1) { reachedPut(); await held; } // hold only the first attempt, after its read
      },
    });
    await atPut; // 34 has read the fence (33) and judged its own token good
    await fencedPutObject(holder35.client, { Bucket: bucket, Key, Body: 'by 35', token: 35n });
    resume();

    const error = await expectRejects(write34, StaleTokenError);
    expect(error.current).toBe(35n);
    // 34's PUT did go out, conditioned on what it had read, and failed its condition.
    const puts34 = holder34.seen.filter((r) => r.method === 'PUT');
    expect(puts34).toHaveLength(1);
    expect(puts34[0]!.status).toBe(412);
    const raw = await getRaw(Key);
    expect(raw.body).toBe('by 35');
    expect(raw.metadata['fencing-token']).toBe('35');
    for (const c of [setup, holder34, holder35]) c.client.destroy();
  });

  it('identical bytes share an ETag: a write equal to the current body is refused; a body that embeds the token needs no refusal', async () => {
    // Holder 34 reads the object 33 wrote and is held; 35 writes. If 35's bytes
    // equal 33's, the ETag (MD5 of the body) would not change and If-Match
    // could not see 35's write, so 35 is refused before sending anything.
    async function race(bodyOf: (token: bigint) => string): Promise<{ by35: unknown; by34: unknown; fence: bigint | null }> {
      const Key = `${prefix()}/aba`;
      const others = newClient();
      await fencedPutObject(others.client, { Bucket: bucket, Key, Body: bodyOf(33n), token: 33n });
      const holder34 = newClient();
      let by35: unknown = 'not tried';
      const by34 = await fencedPutObject(holder34.client, { Bucket: bucket, Key, Body: 'by 34', token: 34n }, {
        beforePut: async () => {
          if (by35 !== 'not tried') return;
          by35 = await fencedPutObject(newClient().client, { Bucket: bucket, Key, Body: bodyOf(35n), token: 35n }).then(() => 'written', (e: unknown) => e);
        },
      }).then(() => 'written', (e: unknown) => e);
      const fence = await readFence(others.client, { Bucket: bucket, Key });
      holder34.client.destroy();
      others.client.destroy();
      return { by35, by34, fence };
    }
    const constant = await race(() => 'state=idle');
    expect(constant.by35).toBeInstanceOf(RepeatedBodyError);
    expect((constant.by35 as RepeatedBodyError).code).toBe('REPEATED_BODY');
    expect(constant.by34).toBe('written'); // 35 never wrote, so 34 is the newest write: the fence went 33 -> 34
    expect(constant.fence).toBe(34n);
    const unique = await race((token) => `state=idle token=${token}`);
    expect(unique.by35).toBe('written');
    expect(unique.by34).toBeInstanceOf(StaleTokenError);
    expect(unique.fence).toBe(35n);
  });

  it('a write made without fencing may be overwritten by any token', async () => {
    const Key = `${prefix()}/unfenced`;
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key, Body: 'legacy' }));
    const { client } = newClient();
    expect(await readFence(client, { Bucket: bucket, Key })).toBeNull();
    await fencedPutObject(client, { Bucket: bucket, Key, Body: 'fenced', token: 1n });
    expect((await getRaw(Key)).metadata['fencing-token']).toBe('1');
    client.destroy();
  });

  it('equal tokens pass: the same holder writing from two clients', async () => {
    const Key = `${prefix()}/equal`;
    const a = newClient();
    const b = newClient();
    await fencedPutObject(a.client, { Bucket: bucket, Key, Body: 'a1', token: 50n });
    await fencedPutObject(b.client, { Bucket: bucket, Key, Body: 'b1', token: 50n });
    await fencedPutObject(a.client, { Bucket: bucket, Key, Body: 'a2', token: 50n }); // a's cache is stale: 412, re-read, write
    expect((await getRaw(Key)).body).toBe('a2');
    expect(a.seen.filter((r) => r.method === 'PUT').map((r) => r.status)).toEqual([200, 412, 200]);
    a.client.destroy();
    b.client.destroy();
  });
});

describe('racing writers', () => {
  it('20 writers with distinct tokens on one key, 10 rounds: the fence never goes back', async () => {
    const Key = `${prefix()}/herd`;
    const writers = Array.from({ length: 20 }, () => newClient());
    let highestAccepted = 0n;
    let serverErrors = 0;
    for (let round = 0; round < 10; round += 1) {
      const base = BigInt(round * 100 + 1);
      // Shuffle who carries which token, so the fastest writer is not always the highest.
      const tokens = writers.map((_, i) => base + BigInt(i)).sort(() => Math.random() - 0.5);
      const accepted: bigint[] = [];
      const results = await Promise.allSettled(
        writers.map(async (w, i) => {
          const token = tokens[i]!;
          await fencedPutObject(w.client, { Bucket: bucket, Key, Body: `round ${round} token ${token}`, token });
          accepted.push(token); // in the order the writes were acknowledged
          return token;
        }),
      );
      for (const [i, result] of results.entries()) {
        if (result.status === 'rejected') {
          // The only acceptable failure: stale, and stale against a larger token.
          expect(result.reason).toBeInstanceOf(StaleTokenError);
          const stale = result.reason as StaleTokenError;
          expect(stale.presented).toBe(tokens[i]);
          expect(stale.current! > stale.presented).toBe(true);
        }
      }
      // Acknowledged in increasing token order: no accepted write was followed by a lower one.
      expect(accepted.length).toBeGreaterThan(0);
      expect([...accepted].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0))).toEqual(accepted);
      expect(accepted[0]! > highestAccepted).toBe(true);
      highestAccepted = accepted[accepted.length - 1]!;
      // The round's highest writer always gets through (nobody can make it stale).
      expect(accepted).toContain(base + 19n);
      const raw = await getRaw(Key);
      expect(raw.metadata['fencing-token']).toBe(String(highestAccepted));
      expect(raw.body).toBe(`round ${round} token ${highestAccepted}`);
    }
    for (const w of writers) {
      serverErrors += w.seen.filter((r) => r.method === 'PUT' && (r.status ?? 0) >= 500).length;
      w.client.destroy();
    }
    // Informational: RGW answers some racing If-Match PUTs with 500; each was settled by a read-back.
    console.info(`s3 herd: ${serverErrors} PUTs answered 5xx and were settled by reading back`);
  });

  it('new-key creation race, distinct tokens: exactly one If-None-Match PUT wins per round', async () => {
    const writers = Array.from({ length: 8 }, () => newClient());
    for (let round = 0; round < 5; round += 1) {
      const Key = `${prefix()}/create-${round}`;
      for (const w of writers) w.seen.length = 0;
      const tokens = writers.map((_, i) => BigInt(i + 1)).sort(() => Math.random() - 0.5);
      const accepted: bigint[] = [];
      const results = await Promise.allSettled(writers.map(async (w, i) => {
        await fencedPutObject(w.client, { Bucket: bucket, Key, Body: `token ${tokens[i]}`, token: tokens[i]! });
        accepted.push(tokens[i]!);
      }));
      for (const r of results) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(StaleTokenError);
      const creations = writers.flatMap((w) => w.seen).filter((r) => r.headers['if-none-match'] === '*' && r.status === 200);
      expect(creations).toHaveLength(1);
      // Later arrivals with larger tokens overwrite the creator (If-Match); smaller ones are stale.
      expect([...accepted].sort((x, y) => (x < y ? -1 : 1))).toEqual(accepted);
      expect(accepted).toContain(8n);
      expect((await getRaw(Key)).body).toBe('token 8');
    }
    for (const w of writers) w.client.destroy();
  });

  it('new-key creation race, one token from many clients: one creation, every write succeeds', async () => {
    // Equal tokens are the same holder writing from several places; all pass,
    // in some order, and the key is created once.
    const Key = `${prefix()}/create-equal`;
    const writers = Array.from({ length: 6 }, () => newClient());
    await Promise.all(writers.map((w, i) => fencedPutObject(w.client, { Bucket: bucket, Key, Body: `writer ${i}`, token: 77n })));
    const creations = writers.flatMap((w) => w.seen).filter((r) => r.headers['if-none-match'] === '*' && r.status === 200);
    expect(creations).toHaveLength(1);
    const raw = await getRaw(Key);
    expect(raw.metadata['fencing-token']).toBe('77');
    expect(raw.body).toMatch(/^writer [0-5]$/);
    for (const w of writers) w.client.destroy();
  });
});

describe('bad input fails before writing', () => {
  /** fencedPutObject with input its types refuse. */
  const untyped = fencedPutObject as (c: S3Client, input: object) => Promise<unknown>;

  /** Run `attempts` with a client of their own on a key of their own (`name`); none of them sent a request. */
  async function noRequest(name: string, attempts: (client: S3Client, Key: string) => Promise<void>, checks: { noObject: boolean }): Promise<void> {
    const Key = `${prefix()}/${name}`;
    const { client, seen } = newClient();
    await attempts(client, Key);
    expect(seen).toEqual([]);
    if (checks.noObject) expect(await exists(Key)).toBe(false);
    client.destroy();
  }

  it('a missing or out-of-range token: InvalidTokenError, no request', async () => {
    await noRequest('badtoken', async (client, Key) => {
      await expectRejects(untyped(client, { Bucket: bucket, Key, Body: 'x' }), InvalidTokenError);
      await expectRejects(fencedPutObject(client, { Bucket: bucket, Key, Body: 'x', token: 0n }), InvalidTokenError);
      await expectRejects(untyped(client, { Bucket: bucket, Key, Body: 'x', token: 35 }), InvalidTokenError);
      await expectRejects(fencedDeleteObject(client, { Bucket: bucket, Key, token: -1n }), InvalidTokenError);
    }, { noObject: true });
  });

  it('a stream body: InvalidArgumentError, no request', async () => {
    await noRequest('stream', async (client, Key) => {
      await expectRejects(untyped(client, { Bucket: bucket, Key, Body: Readable.from(['a', 'b']), token: 5n }), InvalidArgumentError);
    }, { noObject: true });
  });

  it('conditions or fence metadata passed by the caller: InvalidArgumentError, no request', async () => {
    await noRequest('reserved', async (client, Key) => {
      await expectRejects(untyped(client, { Bucket: bucket, Key, Body: 'x', token: 5n, IfMatch: 'abc' }), InvalidArgumentError);
      await expectRejects(
        fencedPutObject(client, { Bucket: bucket, Key, Body: 'x', token: 5n, Metadata: { 'Fencing-Token': '999' } }),
        InvalidArgumentError,
      );
    }, { noObject: false });
  });

  it('corrupt fence metadata on an existing object: refused (fail closed), never overwritten', async () => {
    const Key = `${prefix()}/corrupt`;
    await admin.send(new PutObjectCommand({ Bucket: bucket, Key, Body: 'keep me', Metadata: { 'fencing-token': '12abc' } }));
    const { client, seen } = newClient();
    const error = await expectRejects(fencedPutObject(client, { Bucket: bucket, Key, Body: 'x', token: 99n }), InvalidTokenError);
    expect(error.message).toContain(Key);
    await expectRejects(fencedDeleteObject(client, { Bucket: bucket, Key, token: 99n }), InvalidTokenError);
    await expectRejects(readFence(client, { Bucket: bucket, Key }), InvalidTokenError);
    await expectRejects(fencedGetObject(client, { Bucket: bucket, Key }), InvalidTokenError);
    expect(seen.filter((r) => r.method === 'PUT')).toEqual([]);
    expect((await getRaw(Key)).body).toBe('keep me');
    client.destroy();
  });

  it('a bucket that does not exist: a clear error, at once', async () => {
    const missing = `fk-missing-${randomBytes(5).toString('hex')}`;
    const { client } = newClient();
    const error = await fencedPutObject(client, { Bucket: missing, Key: 'k', Body: 'x', token: 5n }).catch((e: unknown) => e);
    expect((error as Error).name).toBe('NoSuchBucket');
    await expectRejects(readFence(client, { Bucket: missing, Key: 'k' }), InvalidArgumentError);
    expect(await fencedGetObject(client, { Bucket: bucket, Key: `${prefix()}/none` })).toBeNull();
    await expect(fencedGetObject(client, { Bucket: missing, Key: 'k' })).rejects.toMatchObject({ name: 'NoSuchBucket' });
    client.destroy();
  });
});

describe('fencedDeleteObject', () => {
  it('keeps the fence: after a delete by 35, 34 is refused and 36 may recreate', async () => {
    const Key = `${prefix()}/del`;
    const { client } = newClient();
    await fencedPutObject(client, { Bucket: bucket, Key, Body: 'by 35', token: 35n });
    await fencedDeleteObject(client, { Bucket: bucket, Key, token: 35n });

    expect(await fencedGetObject(client, { Bucket: bucket, Key })).toBeNull();
    expect(await readFence(client, { Bucket: bucket, Key })).toBe(35n);
    const raw = await admin.send(new GetObjectCommand({ Bucket: bucket, Key }));
    expect(isTombstone(raw)).toBe(true);
    await raw.Body!.transformToByteArray();

    const other = newClient();
    await expectRejects(fencedPutObject(other.client, { Bucket: bucket, Key, Body: 'by 34', token: 34n }), StaleTokenError);
    await expectRejects(fencedDeleteObject(other.client, { Bucket: bucket, Key, token: 34n }), StaleTokenError);

    await fencedPutObject(other.client, { Bucket: bucket, Key, Body: 'by 36', token: 36n });
    const back = await fencedGetObject(client, { Bucket: bucket, Key });
    expect(back).not.toBeNull();
    expect(back!.token).toBe(36n);
    expect(await back!.Body!.transformToString()).toBe('by 36');
    client.destroy();
    other.client.destroy();
  });

  it('two tombstones never share an ETag (If-Match cannot be fooled by an identical delete)', async () => {
    const Key = `${prefix()}/tomb-aba`;
    const { client } = newClient();
    const first = await fencedDeleteObject(client, { Bucket: bucket, Key, token: 10n });
    const second = await fencedDeleteObject(client, { Bucket: bucket, Key, token: 10n });
    expect(second.etag).not.toBe(first.etag);

    // 11 reads 10's tombstone and is held; 12 deletes meanwhile. Were tombstones
    // empty, 12's would have the ETag 11 read, and 11's PUT would land over it.
    const holder11 = newClient();
    const write11 = fencedDeleteObject(holder11.client, { Bucket: bucket, Key, token: 11n }, {
      beforePut: async () => {
        if (holder11.seen.some((r) => r.method === 'PUT')) return;
        await fencedDeleteObject(newClient().client, { Bucket: bucket, Key, token: 12n });
      },
    });
    await expectRejects(write11, StaleTokenError);
    expect(await readFence(client, { Bucket: bucket, Key })).toBe(12n);
    client.destroy();
    holder11.client.destroy();
  });
});

describe('unknown outcomes', () => {
  it('a 5xx after the PUT landed is settled by the write id (no SDK retries)', async () => {
    const Key = `${prefix()}/lost-reply`;
    const { client, seen } = newClient({ maxAttempts: 1 });
    loseReplies(client, (r, n) => r.method === 'PUT' && n === 1);
    const result = await fencedPutObject(client, { Bucket: bucket, Key, Body: 'landed', token: 9n });
    expect(result.token).toBe(9n);
    expect(seen.map((r) => r.method)).toEqual(['HEAD', 'PUT', 'HEAD']);
    expect((await getRaw(Key)).body).toBe('landed');
    client.destroy();
  });

  it('an SDK retry of a PUT that landed answers 412 and is recognised as ours', async () => {
    const Key = `${prefix()}/sdk-retry`;
    const { client, seen } = newClient({ maxAttempts: 3 });
    await fencedPutObject(client, { Bucket: bucket, Key, Body: 'v1', token: 9n });
    seen.length = 0;
    loseReplies(client, (r, n) => r.method === 'PUT' && n === 1);
    await fencedPutObject(client, { Bucket: bucket, Key, Body: 'v2', token: 9n });
    // The first PUT landed but its reply was lost (500); the SDK resent it (same
    // If-Match): 412; our read-back found our write id.
    expect(seen.map((r) => `${r.method} ${r.status}`)).toEqual(['PUT 500', 'PUT 412', 'HEAD 200']);
    expect((await getRaw(Key)).body).toBe('v2');
    client.destroy();
  });

  it('a 5xx that cannot be settled by reading back: UnknownOutcomeError', async () => {
    const Key = `${prefix()}/unsettled`;
    const { client } = newClient({ maxAttempts: 1 });
    await fencedPutObject(client, { Bucket: bucket, Key, Body: 'v1', token: 9n });
    loseReplies(client, (r) => r.method === 'PUT' || r.method === 'HEAD');
    const error = await expectRejects(fencedPutObject(client, { Bucket: bucket, Key, Body: 'v2', token: 9n }), UnknownOutcomeError);
    expect(error.retryable).toBe(true);
    client.destroy();
  });
});

describe('the fence cache when holders take turns', () => {
  it("a new holder's first write reads first instead of failing on its own stale cache", async () => {
    const Key = `${prefix()}/turns`;
    const a = newClient();
    const b = newClient();
    await fencedPutObject(a.client, { Bucket: bucket, Key, Body: 'a1', token: 10n });
    await fencedPutObject(b.client, { Bucket: bucket, Key, Body: 'b1', token: 11n });
    // A holds the lock again with a larger token; its cache (from a1) is stale.
    a.seen.length = 0;
    await fencedPutObject(a.client, { Bucket: bucket, Key, Body: 'a2', token: 12n });
    expect(a.seen.map((r) => `${r.method}`)).toEqual(['HEAD', 'PUT']);
    // The same holder writing again: one request.
    a.seen.length = 0;
    await fencedPutObject(a.client, { Bucket: bucket, Key, Body: 'a3', token: 12n });
    expect(a.seen.map((r) => r.method)).toEqual(['PUT']);
    // A smaller token than the cached one: refused with no request at all.
    a.seen.length = 0;
    await expect(fencedPutObject(a.client, { Bucket: bucket, Key, Body: 'late', token: 11n })).rejects.toBeInstanceOf(StaleTokenError);
    expect(a.seen).toEqual([]);
    expect((await getRaw(Key)).body).toBe('a3');
    a.client.destroy();
    b.client.destroy();
  });
});
