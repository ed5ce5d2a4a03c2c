// fencekeeper/s3's two layouts against a real S3 server (Ceph RGW 16 in CI),
// where bodies repeat: the same report written again, bodies alternating
// between two values, many writers with random tokens. In place, a conditional
// PUT compares ETags, i.e. bytes; through a pointer, it compares pointer
// writes, which never repeat.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CopyObjectCommand, DeleteObjectCommand, HeadObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import {
  CorruptFenceError, InvalidArgumentError, InvalidTokenError, LayoutMismatchError, RepeatedBodyError, StaleTokenError, UnknownOutcomeError,
} from '../../../src/index.js';
import type { FencekeeperError } from '../../../src/index.js';
import { fencedDeleteObject, fencedGetObject, fencedPutObject, readFence } from '../../../adapters/s3/index.js';
import type { ObjectLayout } from '../../../adapters/s3/index.js';
import { TestBucket, expectRejects, loseReplies, newClient, proxiedClient, randomPrefix } from './helpers.js';
import type { RecordingClient } from './helpers.js';
import { until } from '../../helpers/wait.js';

const testBucket = new TestBucket('layout');
const Bucket = testBucket.name;
beforeAll(() => testBucket.create());
afterAll(() => testBucket.remove());

const pointer = { layout: 'pointer' } as const;

async function body(Key: string, client = testBucket.admin): Promise<{ text: string; token: bigint | null; metadata: Record<string, string> } | null> {
  const out = await fencedGetObject(client, { Bucket, Key });
  if (out === null) return null;
  return { text: await out.Body!.transformToString(), token: out.token, metadata: out.Metadata ?? {} };
}

const dataObjects = (Key: string): Promise<string[]> => testBucket.keys(`${Key}.fencekeeper/`);

function destroy(clients: RecordingClient[]): void {
  for (const c of clients) c.client.destroy();
}

describe('the pointer layout', () => {
  it('writes an immutable data object, then moves the pointer; reads follow it', async () => {
    const Key = `${randomPrefix()}/report.json`;
    const { client, seen } = newClient();
    const first = await fencedPutObject(client, {
      Bucket, Key, Body: '{"rows":1}', token: 35n, ContentType: 'application/json', Metadata: { owner: 'billing' },
    }, pointer);
    expect(seen.map((r) => `${r.method} ${r.path.slice(Bucket.length + 2)} ${r.headers['if-none-match'] ?? r.headers['if-match'] ?? ''}`.trim()))
      .toEqual([`HEAD ${Key}`, `PUT ${first.dataKey} *`, `PUT ${Key} *`]);
    expect(first.dataKey).toMatch(new RegExp(`^${Key.replace('.', '\\.')}\\.fencekeeper/0000000000000000035-1-[0-9a-f-]{36}$`));

    const stored = await testBucket.raw(Key);
    expect(stored.metadata).toMatchObject({ 'fencing-layout': 'pointer', 'fencing-token': '35', 'fencing-data': first.dataKey!.split('/').pop() });
    expect(stored.metadata['owner']).toBeUndefined(); // the user's metadata lives on the data object
    const data = await testBucket.raw(first.dataKey!);
    expect(data.body).toBe('{"rows":1}');
    expect(data.metadata).toMatchObject({ owner: 'billing', 'fencing-layout': 'data', 'fencing-token': '35' });
    expect(first.etag).toBe(data.etag);

    const read = await fencedGetObject(client, { Bucket, Key });
    expect(read!.token).toBe(35n);
    expect(read!.ContentType).toBe('application/json');
    expect(read!.Metadata).toMatchObject({ owner: 'billing' });
    expect(await read!.Body!.transformToString()).toBe('{"rows":1}');
    expect(await readFence(client, { Bucket, Key })).toBe(35n);

    // The steady state, the same body again: a new data object and the
    // pointer moved by If-Match, no HEAD; the pointer's ETag changes anyway.
    seen.length = 0;
    const second = await fencedPutObject(client, { Bucket, Key, Body: '{"rows":1}', token: 35n }, pointer);
    expect(seen.map((r) => r.method)).toEqual(['PUT', 'PUT']);
    expect(seen[1]!.headers['if-match']).toBe(stored.etag.replaceAll('"', ''));
    expect(second.dataKey).not.toBe(first.dataKey);
    expect(second.etag).toBe(first.etag); // the same bytes: the same data ETag...
    expect((await testBucket.raw(Key)).etag).not.toBe(stored.etag); // ...but never the same pointer
    client.destroy();
  });

  it('readers see the old version until the pointer moves, then the new one, whole', async () => {
    const Key = `${randomPrefix()}/switch`;
    const writer = newClient();
    await fencedPutObject(writer.client, { Bucket, Key, Body: 'old', token: 1n }, pointer);
    let readWhileHeld: Awaited<ReturnType<typeof body>> = null;
    let dataWritten = false;
    await fencedPutObject(writer.client, { Bucket, Key, Body: 'new', token: 2n }, {
      ...pointer,
      beforePut: async () => {
        dataWritten = (await dataObjects(Key)).length === 2;
        readWhileHeld = await body(Key);
      },
    });
    expect(dataWritten).toBe(true); // the new data object existed while readers still got the old one
    expect(readWhileHeld).toMatchObject({ text: 'old', token: 1n });
    expect(await body(Key)).toMatchObject({ text: 'new', token: 2n });
    writer.client.destroy();
  });

  it('a 5xx after the pointer moved is settled by reading it back; an SDK retry answered 412 is recognised as ours', async () => {
    const Key = `${randomPrefix()}/lost`;
    const once = newClient({ maxAttempts: 1 });
    // The second PUT is the pointer's: it lands, its reply is lost.
    loseReplies(once.client, (r, n) => r.method === 'PUT' && n === 2);
    const result = await fencedPutObject(once.client, { Bucket, Key, Body: 'landed', token: 9n }, pointer);
    expect(once.seen.map((r) => `${r.method} ${r.status}`)).toEqual(['HEAD 404', 'PUT 200', 'PUT 500', 'HEAD 200']);
    expect(await body(Key)).toMatchObject({ text: 'landed', token: 9n });
    expect(result.dataKey).toBeDefined();

    const retrying = newClient({ maxAttempts: 3 });
    await fencedPutObject(retrying.client, { Bucket, Key, Body: 'v1', token: 9n }, pointer);
    retrying.seen.length = 0;
    loseReplies(retrying.client, (r, n) => r.method === 'PUT' && (n === 1 || n === 3)); // the data PUT's and the pointer PUT's first replies
    await fencedPutObject(retrying.client, { Bucket, Key, Body: 'v2', token: 9n }, pointer);
    expect(retrying.seen.map((r) => `${r.method} ${r.status}`)).toEqual(['PUT 500', 'PUT 412', 'HEAD 200', 'PUT 500', 'PUT 412', 'HEAD 200']);
    expect(await body(Key)).toMatchObject({ text: 'v2', token: 9n });
    destroy([once, retrying]);
  });

  it("a pointer PUT that landed with its reply lost, and a read-back that fails too: UnknownOutcomeError, and its data object is kept (the pointer names it)", async () => {
    const Key = `${randomPrefix()}/unresolved`;
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'v1', token: 1n }, pointer);
    const pointerMarker = '"fencekeeper":"pointer"'; // only in a pointer PUT's body
    let armed = false;
    // The pointer PUT lands, its reply is lost; so is the reply to the HEAD that reads it back.
    const w = await proxiedClient({
      observe: (chunk, from) => {
        if (armed && from === 'client' && chunk.includes(pointerMarker)) w.proxy.loseReplyTo(`HEAD /${Bucket}/${Key} `);
      },
    });
    const error = await expectRejects(fencedPutObject(w.client, { Bucket, Key, Body: 'by the writer', token: 2n }, {
      ...pointer,
      beforePut: async () => {
        armed = true;
        w.proxy.loseReplyTo(pointerMarker);
      },
    }), UnknownOutcomeError);
    expect(error.message).toMatch(/may or may not have landed .*reading the object back failed/);
    expect(w.proxy.repliesLost).toBe(2);
    // It had landed: the pointer names the writer's data object, which must still be there.
    expect(await body(Key)).toMatchObject({ text: 'by the writer', token: 2n });
    expect(await dataObjects(Key)).toHaveLength(2);
    expect(w.seen.map((r) => `${r.method} ${r.status}`)).toEqual(['HEAD 200', 'PUT 200', 'PUT -1', 'HEAD -1']); // no DELETE
    w.client.destroy();
    await w.proxy.close();
  });

  it('a pointer PUT that had not landed when the writer gave up (aborted) lands later: its data object is still there', async () => {
    const Key = `${randomPrefix()}/lands-later`;
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'v1', token: 1n }, pointer);
    const w = await proxiedClient();
    const abort = new AbortController();
    // The pointer PUT goes into a black hole (the proxy stops reading it), and
    // the writer gives up on it a second later: the call fails, and nothing
    // has reached the server yet.
    const aborted = new Promise((resolve) => abort.signal.addEventListener('abort', resolve));
    // (Its outcome is caught at once: the call may fail before the test looks.)
    const writing = fencedPutObject(w.client, { Bucket, Key, Body: 'by the writer', token: 2n }, {
      ...pointer,
      signal: abort.signal,
      beforePut: async () => {
        w.proxy.blackhole();
        setTimeout(() => abort.abort(), 1000);
      },
    }).then(() => 'written', (e: unknown) => e);
    await aborted;
    expect(await readFence(testBucket.admin, { Bucket, Key })).toBe(1n); // not landed
    // The network heals and delivers the PUT: its If-Match still holds, so it lands now.
    w.proxy.resume();
    expect(((await writing) as { name?: string }).name).toBe('AbortError');
    await until(async () => (await readFence(testBucket.admin, { Bucket, Key })) === 2n, 'the delayed pointer PUT to land', 20_000);
    expect(await body(Key)).toMatchObject({ text: 'by the writer', token: 2n });
    expect(w.seen.map((r) => r.method)).toEqual(['HEAD', 'PUT', 'PUT']); // no DELETE of its data object
    w.client.destroy();
    await w.proxy.close();
  });

  it('two writers with the same token: a pointer naming the other one\'s data object (same token and generation, another write id) is not ours', async () => {
    const Key = `${randomPrefix()}/same-token`;
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'v1', token: 1n }, pointer);
    const w1 = newClient();
    const w2 = newClient();
    let w2Written: Awaited<ReturnType<typeof fencedPutObject>> | undefined;
    // w1 has written its data object and is about to move the pointer; w2,
    // holding the same token, writes first. w1's If-Match fails (412) and it
    // reads the pointer: token 5, generation 1, but w2's write id.
    const w1Written = await fencedPutObject(w1.client, { Bucket, Key, Body: 'by w1', token: 5n }, {
      ...pointer,
      beforePut: async () => {
        w2Written ??= await fencedPutObject(w2.client, { Bucket, Key, Body: 'by w2', token: 5n }, pointer);
      },
    });
    expect(w2Written!.dataKey).not.toBe(w1Written.dataKey);
    expect(w2Written!.dataKey!.replace(/[0-9a-f-]{36}$/, '')).toBe(w1Written.dataKey!.replace(/[0-9a-f-]{36}$/, '')); // only the write id differs
    // w1 wrote again (an equal token passes) rather than take w2's write for its own:
    // the pointer names w1's data object, and the key reads w1's body.
    expect(await body(Key)).toMatchObject({ text: 'by w1', token: 5n });
    expect((await testBucket.raw(Key)).metadata['fencing-data']).toBe(w1Written.dataKey!.split('/').pop());
    expect(w1.seen.map((r) => `${r.method} ${r.status}`)).toEqual(['HEAD 200', 'PUT 200', 'PUT 412', 'HEAD 200', 'PUT 200']);
    destroy([w1, w2]);
  });

  it("two writers with the same token: a data object carrying the other one's write id under the name the pointer names is refused on read", async () => {
    const Key = `${randomPrefix()}/same-token-read`;
    const first = await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'by w1', token: 5n }, pointer);
    const w2 = newClient();
    const second = await fencedPutObject(w2.client, { Bucket, Key, Body: 'by w2', token: 5n }, pointer);
    w2.client.destroy();
    // w1's data object put under w2's name (a copy keeps its metadata): the
    // same token, layout 'data', generation 1; only the write id tells.
    await testBucket.admin.send(new CopyObjectCommand({ Bucket, Key: second.dataKey!, CopySource: `${Bucket}/${first.dataKey!}` }));
    const error = await expectRejects(fencedGetObject(testBucket.admin, { Bucket, Key }), CorruptFenceError);
    expect(error.message).toContain(second.dataKey!);
    expect(error.message).toContain('does not carry the fence its pointer names');
  });

  it('deletes keep the fence: a tombstone pointer; 34 is refused, 36 writes again', async () => {
    const Key = `${randomPrefix()}/del`;
    const { client } = newClient();
    await fencedPutObject(client, { Bucket, Key, Body: 'by 35', token: 35n }, pointer);
    await fencedDeleteObject(client, { Bucket, Key, token: 35n }, pointer);
    expect(await body(Key)).toBeNull();
    expect(await readFence(client, { Bucket, Key })).toBe(35n);
    expect((await testBucket.raw(Key)).metadata).toMatchObject({ 'fencing-layout': 'pointer', 'fencing-tombstone': '1', 'fencing-token': '35' });

    const other = newClient();
    await expectRejects(fencedPutObject(other.client, { Bucket, Key, Body: 'by 34', token: 34n }, pointer), StaleTokenError);
    await expectRejects(fencedDeleteObject(other.client, { Bucket, Key, token: 34n }, pointer), StaleTokenError);
    await fencedPutObject(other.client, { Bucket, Key, Body: 'by 36', token: 36n }, pointer);
    expect(await body(Key)).toMatchObject({ text: 'by 36', token: 36n });

    const Missing = `${randomPrefix()}/never-written`;
    await fencedDeleteObject(client, { Bucket, Key: Missing, token: 5n }, pointer);
    expect(await readFence(client, { Bucket, Key: Missing })).toBe(5n);
    expect(await body(Missing)).toBeNull();
    client.destroy();
    other.client.destroy();
  });

  it('a write refused as stale removes its own data object when no pointer PUT of it can land', async () => {
    const Key = `${randomPrefix()}/orphan`;
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'by 33', token: 33n }, pointer);
    const holder34 = newClient();
    const write34 = fencedPutObject(holder34.client, { Bucket, Key, Body: 'by 34', token: 34n }, {
      ...pointer,
      beforePut: async () => {
        if (holder34.seen.filter((r) => r.method === 'PUT').length > 1) return;
        await fencedPutObject(newClient().client, { Bucket, Key, Body: 'by 35', token: 35n }, pointer);
      },
    });
    await expectRejects(write34, StaleTokenError);
    const puts = holder34.seen.filter((r) => r.method === 'PUT').map((r) => r.status);
    expect(puts).toEqual([200, 412]); // its data object, then its pointer PUT refused
    const names = (await dataObjects(Key)).map((k) => k.split('/').pop()!.slice(0, 19));
    expect(names).toEqual(['0000000000000000033', '0000000000000000035']);
    holder34.client.destroy();
  });
});

// A holder reads the key and is held right before its PUT (the paused
// holder); newer holders write meanwhile, in an order the test chooses; then
// the paused holder resumes. Deterministic: no race is left to chance.
interface PausedRound {
  /** The paused holder's outcome: 'written' or the error. */
  readonly paused: unknown;
  /** The intervening writes' outcomes. */
  readonly newer: unknown[];
  /** The key's fence afterwards, and the largest token acknowledged to anyone. */
  readonly fence: bigint | null;
  readonly largestAcknowledged: bigint;
}

async function pausedHolderRound(
  layout: ObjectLayout,
  base: bigint,
  first: string,
  newerBodies: readonly string[],
  pausedOp: 'put' | 'delete' = 'put',
): Promise<PausedRound> {
  const Key = `${randomPrefix()}/paused`;
  const options = { layout } as const;
  await fencedPutObject(testBucket.admin, { Bucket, Key, Body: first, token: base }, options);
  const holder = newClient();
  const newer: unknown[] = [];
  let largestAcknowledged = base;
  let released = false;
  const write = { Bucket, Key, token: base + 1n };
  const beforePut = async (): Promise<void> => {
    if (released) return;
    released = true;
    for (const [i, text] of newerBodies.entries()) {
      const token = base + 2n + BigInt(i);
      const other = newClient();
      newer.push(await fencedPutObject(other.client, { Bucket, Key, Body: text, token }, options).then(() => {
        largestAcknowledged = token;
        return 'written';
      }, (e: unknown) => e));
      other.client.destroy();
    }
  };
  const outcome = pausedOp === 'put'
    ? fencedPutObject(holder.client, { ...write, Body: first === 'A' ? 'B' : 'A' }, { ...options, beforePut })
    : fencedDeleteObject(holder.client, write, { ...options, beforePut });
  const paused = await outcome.then(() => 'written', (e: unknown) => e);
  if (paused === 'written' && base + 1n > largestAcknowledged) largestAcknowledged = base + 1n;
  const fence = await readFence(testBucket.admin, { Bucket, Key });
  holder.client.destroy();
  return { paused, newer, fence, largestAcknowledged };
}

describe('the paused holder, with bodies that repeat', () => {
  const ROUNDS = 5;

  it('in place, bodies alternating A, B, A: the paused holder lands and the fence goes back (the documented hazard)', async () => {
    // Holder base+1 read A (base) and pauses; base+2 writes B, base+3 writes A;
    // A's ETag is back, so the paused holder's If-Match passes.
    let wentBack = 0;
    for (let round = 0; round < ROUNDS; round += 1) {
      const base = BigInt(100 * (round + 1));
      const r = await pausedHolderRound('in-place', base, 'A', ['B', 'A']);
      expect(r.newer).toEqual(['written', 'written']);
      expect(r.paused).toBe('written');
      expect(r.largestAcknowledged).toBe(base + 3n);
      if (r.fence! < r.largestAcknowledged) wentBack += 1;
    }
    expect(wentBack).toBe(ROUNDS); // every round: the fence went from base+3 back to base+1
  });

  it('in place, a delete with bodies alternating: the stale tombstone lands over the newer data', async () => {
    const r = await pausedHolderRound('in-place', 500n, 'A', ['B', 'A'], 'delete');
    expect(r.paused).toBe('written');
    expect(r.fence).toBe(501n);
  });

  it('in place, the same body again: refused with REPEATED_BODY, so the fence does not go back', async () => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const base = BigInt(100 * (round + 1));
      const r = await pausedHolderRound('in-place', base, 'A', ['A']);
      expect(r.newer).toHaveLength(1);
      expect(r.newer[0]).toBeInstanceOf(RepeatedBodyError);
      const error = r.newer[0] as RepeatedBodyError;
      expect(error.code).toBe('REPEATED_BODY');
      expect(error.message).toMatch(/embed the token or a write id/);
      expect(error.message).toMatch(/layout: 'pointer'/);
      // base+2 wrote nothing, so the paused holder's write is the newest: no step back.
      expect(r.paused).toBe('written');
      expect(r.fence).toBe(r.largestAcknowledged);
    }
  });

  it.each([
    ['alternating A, B, A', ['B', 'A']],
    ['constant A, A', ['A', 'A']],
  ] as const)('through a pointer, %s: the paused holder is refused and the fence never goes back', async (_, bodies) => {
    for (let round = 0; round < ROUNDS; round += 1) {
      const base = BigInt(100 * (round + 1));
      for (const op of ['put', 'delete'] as const) {
        const r = await pausedHolderRound('pointer', base, 'A', bodies, op);
        expect(r.newer).toEqual(['written', 'written']);
        expect(r.paused).toBeInstanceOf(StaleTokenError);
        expect((r.paused as StaleTokenError).current).toBe(base + 3n);
        expect(r.fence).toBe(base + 3n);
      }
    }
  });
});

describe('many writers, random tokens, bodies that repeat', () => {
  const WRITERS = 50;
  const ROUNDS = 6;

  /**
   * Distinct random tokens past 2^53 (a JS number would round them): round r
   * draws from a window that overlaps round r-1's, so each round has both
   * writers that can win and writers that are already stale.
   */
  function tokenRounds(): bigint[][] {
    const used = new Set<bigint>();
    return Array.from({ length: ROUNDS }, (_, r) => Array.from({ length: WRITERS }, () => {
      for (;;) {
        const token = 2n ** 53n + BigInt(r * 1000 + randomBytes(2).readUInt16BE(0) % 2000);
        if (!used.has(token)) {
          used.add(token);
          return token;
        }
      }
    }));
  }

  interface Round {
    readonly acknowledged: bigint[];
    readonly refused: FencekeeperError[];
  }

  async function round(writers: RecordingClient[], Key: string, tokens: bigint[], bodyOf: (i: number) => string, layout: ObjectLayout): Promise<Round> {
    const acknowledged: bigint[] = [];
    const refused: FencekeeperError[] = [];
    await Promise.all(writers.map(async (w, i) => {
      const token = tokens[i]!;
      try {
        await fencedPutObject(w.client, { Bucket, Key, Body: bodyOf(i), token, Metadata: { writer: String(token) } }, { layout, maxAttempts: 200 });
        acknowledged.push(token);
      } catch (error) {
        refused.push(error as FencekeeperError);
      }
    }));
    return { acknowledged, refused };
  }

  it.each([
    ['constant', (_round: number) => (_i: number) => 'the same report'],
    ['alternating between two values', (_round: number) => (i: number) => (i % 2 === 0 ? 'value A' : 'value B')],
  ] as const)('through a pointer, %s bodies: the fence always equals the largest acknowledged token, and reads return its data', async (_, bodies) => {
    const Key = `${randomPrefix()}/herd`;
    const writers = Array.from({ length: WRITERS }, () => newClient());
    const rounds = tokenRounds();
    let largest = 0n;
    for (let r = 0; r < ROUNDS; r += 1) {
      const tokens = rounds[r]!;
      const { acknowledged, refused } = await round(writers, Key, tokens, bodies(r), 'pointer');
      for (const error of refused) {
        expect(error).toBeInstanceOf(StaleTokenError);
        const stale = error as StaleTokenError;
        expect(stale.current! > stale.presented).toBe(true);
      }
      // Nobody can make the round's largest token stale if it is above every earlier one: it gets through.
      const roundMax = tokens.reduce((a, b) => (a > b ? a : b));
      if (roundMax > largest) expect(acknowledged).toContain(roundMax);
      for (const token of acknowledged) if (token > largest) largest = token;
      expect(await readFence(testBucket.admin, { Bucket, Key })).toBe(largest);
      const read = await body(Key);
      expect(read!.token).toBe(largest);
      expect(read!.metadata['writer']).toBe(String(largest)); // the data object of that very write
    }
    // The writers really raced: pointer PUTs lost to one another (412) and were decided again.
    const lost = writers.flatMap((w) => w.seen).filter((r) => r.method === 'PUT' && !r.path.includes('.fencekeeper/') && r.status === 412);
    expect(lost.length).toBeGreaterThan(0);
    destroy(writers);
  });

  it('in place, a constant body per round: repeats are refused with REPEATED_BODY, and the fence never goes back', async () => {
    const Key = `${randomPrefix()}/herd-in-place`;
    const writers = Array.from({ length: WRITERS }, () => newClient());
    const rounds = tokenRounds();
    let largest = 0n;
    let bodyOfLargest = '';
    let repeated = 0;
    for (let r = 0; r < ROUNDS; r += 1) {
      const tokens = rounds[r]!;
      const text = `report of round ${r}`;
      const { acknowledged, refused } = await round(writers, Key, tokens, () => text, 'in-place');
      for (const error of refused) {
        expect(['STALE_TOKEN', 'REPEATED_BODY']).toContain(error.code);
        if (error.code === 'REPEATED_BODY') repeated += 1;
      }
      // Once one write of this round's body landed, every other is a repeat
      // (or stale): at most one write per round goes through.
      expect(acknowledged.length).toBeLessThanOrEqual(1);
      for (const token of acknowledged) {
        expect(token > largest).toBe(true);
        largest = token;
        bodyOfLargest = text;
      }
      expect(await readFence(testBucket.admin, { Bucket, Key })).toBe(largest);
      expect(await body(Key)).toMatchObject({ text: bodyOfLargest, token: largest });
    }
    expect(repeated).toBeGreaterThan(0);
    destroy(writers);
  });
});

describe('one layout per key', () => {
  it('a pointer write over an object written in place (or its tombstone) is refused, nothing written', async () => {
    for (const setup of ['put', 'delete'] as const) {
      const Key = `${randomPrefix()}/in-place`;
      if (setup === 'put') await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'in place', token: 5n });
      else await fencedDeleteObject(testBucket.admin, { Bucket, Key, token: 5n });
      const before = await testBucket.raw(Key);
      const { client, seen } = newClient();
      for (const attempt of [
        () => fencedPutObject(client, { Bucket, Key, Body: 'x', token: 6n }, pointer),
        () => fencedDeleteObject(client, { Bucket, Key, token: 6n }, pointer),
      ]) {
        const error = await expectRejects(attempt(), LayoutMismatchError);
        expect(error.code).toBe('LAYOUT_MISMATCH');
        expect([error.expected, error.found]).toEqual(['pointer', 'in-place']);
      }
      expect(seen.map((r) => r.method)).toEqual(['HEAD', 'HEAD']);
      expect((await testBucket.raw(Key)).etag).toBe(before.etag);
      expect(await dataObjects(Key)).toEqual([]);
      client.destroy();
    }
  });

  it('an in-place write over a pointer, or over a data object, is refused, nothing written', async () => {
    const Key = `${randomPrefix()}/pointer`;
    const written = await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'through a pointer', token: 5n }, pointer);
    const before = await testBucket.raw(Key);
    const { client, seen } = newClient();
    for (const attempt of [
      () => fencedPutObject(client, { Bucket, Key, Body: 'x', token: 6n }),
      () => fencedDeleteObject(client, { Bucket, Key, token: 6n }),
    ]) {
      const error = await expectRejects(attempt(), LayoutMismatchError);
      expect([error.expected, error.found]).toEqual(['in-place', 'pointer']);
    }
    // A data object's own key lies in the data prefix (refused before any
    // request, below); a copy of one elsewhere is still recognised by its metadata.
    await expectRejects(fencedPutObject(client, { Bucket, Key: written.dataKey!, Body: 'x', token: 6n }), InvalidArgumentError);
    const copy = `${Key}-copy-of-data`;
    await testBucket.admin.send(new CopyObjectCommand({ Bucket, Key: copy, CopySource: `${Bucket}/${written.dataKey!}` }));
    const onData = await expectRejects(fencedPutObject(client, { Bucket, Key: copy, Body: 'x', token: 6n }), LayoutMismatchError);
    expect(onData.found).toBe('data');
    expect(seen.every((r) => r.method === 'HEAD')).toBe(true);
    expect((await testBucket.raw(Key)).etag).toBe(before.etag);
    expect(await body(Key)).toMatchObject({ text: 'through a pointer', token: 5n });
    client.destroy();
  });

  it("a fenced write into a pointer key's data prefix is refused in either layout, before any request (the collector removes objects there)", async () => {
    const Key = `${randomPrefix()}/owner`;
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'v1', token: 1n }, pointer);
    // A name the collector would take for a data object of generation 1, and one it would not.
    const inside = [`${Key}.fencekeeper/0000000000000000007-1-${randomUUID()}`, `${Key}.fencekeeper/notes.txt`];
    const { client, seen } = newClient();
    for (const target of inside) {
      for (const layout of ['in-place', 'pointer'] as const) {
        const put = await expectRejects(fencedPutObject(client, { Bucket, Key: target, Body: 'fence 7', token: 7n }, { layout }), InvalidArgumentError);
        expect(put.message).toContain(`lies inside the data prefix of ${JSON.stringify(Key)}`);
        await expectRejects(fencedDeleteObject(client, { Bucket, Key: target, token: 7n }, { layout }), InvalidArgumentError);
      }
      expect(await testBucket.exists(target)).toBe(false);
    }
    expect(seen).toEqual([]);
    expect(await dataObjects(Key)).toHaveLength(1); // v1's data object only
    client.destroy();
  });

  it('an object written without fencing may be taken over by the pointer layout', async () => {
    const Key = `${randomPrefix()}/legacy`;
    await testBucket.admin.send(new PutObjectCommand({ Bucket, Key, Body: 'legacy' }));
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'fenced now', token: 3n }, pointer);
    expect(await body(Key)).toMatchObject({ text: 'fenced now', token: 3n });
  });
});

describe('bad input: a clear error, nothing written', () => {
  it('missing Bucket or Key, bad tokens, a bad layout, keys the pointer layout cannot keep: no request', async () => {
    const Key = `${randomPrefix()}/bad`;
    const { client, seen } = newClient();
    const untyped = fencedPutObject as (c: typeof client, input: object, options?: object) => Promise<unknown>;
    await expectRejects(untyped(client, { Key, Body: 'x', token: 5n }, pointer), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Body: 'x', token: 5n }, pointer), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key: '', Body: 'x', token: 5n }, pointer), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: 2n ** 63n }, pointer), InvalidTokenError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: 10n ** 400n }, pointer), InvalidTokenError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: '35' }, pointer), InvalidTokenError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: 35 }, pointer), InvalidTokenError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: 5n }, { layout: 'sideways' }), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: 5n }, { layout: 'pointer', maxAttempts: 0 }), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key: 'k'.repeat(1000), Body: 'x', token: 5n }, pointer), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key: `${Key}.fencekeeper/x`, Body: 'x', token: 5n }, pointer), InvalidArgumentError);
    await expectRejects(fencedDeleteObject(client, { Bucket, Key: 'k'.repeat(1000), token: 5n }, pointer), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key, Body: 'x', token: 5n, Metadata: { 'Fencing-Layout': 'in-place' } }, pointer), InvalidArgumentError);
    await expectRejects(fencedGetObject(client, { Bucket, Key: '' }), InvalidArgumentError);
    expect(seen).toEqual([]);
    expect(await testBucket.exists(Key)).toBe(false);
    client.destroy();
  });

  it.each([
    ['an unknown layout', { 'fencing-layout': 'sideways', 'fencing-token': '5', 'fencing-write': randomUUID() }, CorruptFenceError],
    ['a token that does not parse', { 'fencing-layout': 'pointer', 'fencing-token': '12abc', 'fencing-write': randomUUID(), 'fencing-generation': '1', 'fencing-generation-since': '0', 'fencing-tombstone': '1' }, InvalidTokenError],
    ['no generation', { 'fencing-layout': 'pointer', 'fencing-token': '5', 'fencing-write': randomUUID(), 'fencing-generation-since': '0', 'fencing-tombstone': '1' }, CorruptFenceError],
    ['generation 0', { 'fencing-layout': 'pointer', 'fencing-token': '5', 'fencing-write': randomUUID(), 'fencing-generation': '0', 'fencing-generation-since': '0', 'fencing-tombstone': '1' }, CorruptFenceError],
    ['neither data nor tombstone', { 'fencing-layout': 'pointer', 'fencing-token': '5', 'fencing-write': randomUUID(), 'fencing-generation': '1', 'fencing-generation-since': '0' }, CorruptFenceError],
    ['data of another token', { 'fencing-layout': 'pointer', 'fencing-token': '5', 'fencing-write': randomUUID(), 'fencing-generation': '1', 'fencing-generation-since': '0', 'fencing-data': `0000000000000000006-1-${randomUUID()}` }, CorruptFenceError],
    ['a malformed write id', { 'fencing-layout': 'pointer', 'fencing-token': '5', 'fencing-write': 'x', 'fencing-generation': '1', 'fencing-generation-since': '0', 'fencing-tombstone': '1' }, CorruptFenceError],
  ] as const)('a pointer with %s: refused by every operation (fail closed), never overwritten', async (_, Metadata, type) => {
    const Key = `${randomPrefix()}/corrupt`;
    await testBucket.admin.send(new PutObjectCommand({ Bucket, Key, Body: 'keep me', Metadata }));
    const { client, seen } = newClient();
    const error = await expectRejects(fencedPutObject(client, { Bucket, Key, Body: 'x', token: 99n }, pointer), type);
    expect(error.message).toContain(Key);
    await expectRejects(fencedPutObject(client, { Bucket, Key, Body: 'x', token: 99n }), type);
    await expectRejects(fencedDeleteObject(client, { Bucket, Key, token: 99n }, pointer), type);
    await expectRejects(readFence(client, { Bucket, Key }), type);
    await expectRejects(fencedGetObject(client, { Bucket, Key }), type);
    expect(seen.filter((r) => r.method === 'PUT')).toEqual([]);
    expect((await testBucket.raw(Key)).body).toBe('keep me');
    expect(await dataObjects(Key)).toEqual([]);
    client.destroy();
  });

  it('a pointer whose data object was removed behind its back, or replaced: CorruptFenceError on read', async () => {
    const Key = `${randomPrefix()}/dangling`;
    const written = await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'v1', token: 5n }, pointer);
    await testBucket.admin.send(new PutObjectCommand({ Bucket, Key: written.dataKey!, Body: 'forged', Metadata: { 'fencing-token': '5' } }));
    await expectRejects(fencedGetObject(testBucket.admin, { Bucket, Key }), CorruptFenceError);
    await testBucket.admin.send(new DeleteObjectCommand({ Bucket, Key: written.dataKey! }));
    const error = await expectRejects(fencedGetObject(testBucket.admin, { Bucket, Key }), CorruptFenceError);
    expect(error.message).toContain(written.dataKey!);
    // The fence itself is intact: a writer may repair the key by writing it.
    await fencedPutObject(testBucket.admin, { Bucket, Key, Body: 'v2', token: 5n }, pointer);
    expect(await body(Key)).toMatchObject({ text: 'v2', token: 5n });
  });

  it('conditional and ranged reads apply to the body, in either layout', async () => {
    const Key = `${randomPrefix()}/ranged`;
    const written = await fencedPutObject(testBucket.admin, { Bucket, Key, Body: '0123456789', token: 5n }, pointer);
    const ranged = await fencedGetObject(testBucket.admin, { Bucket, Key, Range: 'bytes=2-4' });
    expect(await ranged!.Body!.transformToString()).toBe('234');
    const matched = await fencedGetObject(testBucket.admin, { Bucket, Key, IfMatch: written.etag });
    expect(await matched!.Body!.transformToString()).toBe('0123456789');
    const head = await testBucket.admin.send(new HeadObjectCommand({ Bucket, Key }));
    expect(head.ETag).not.toBe(written.etag); // the pointer's own ETag is not the body's
    await expectRejects(fencedGetObject(testBucket.admin, { Bucket, Key, VersionId: 'null' }), InvalidArgumentError);
  });
});
