// collectGarbage against a real S3 server (Ceph RGW 16 in CI): the pointer
// layout's superseded data objects go, and only those no pointer names or can
// name again, after a grace period; readers and paused writers caught in the
// middle still get a clean answer.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CopyObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { InvalidArgumentError, LayoutMismatchError } from '../../../src/index.js';
import { collectGarbage, fencedDeleteObject, fencedGetObject, fencedPutObject, readFence } from '../../../adapters/s3/index.js';
import { Gate, TestBucket, expectRejects, holdRequests, newClient, proxiedClient, randomPrefix } from './helpers.js';

const testBucket = new TestBucket('gc');
const Bucket = testBucket.name;
const admin = testBucket.admin;
beforeAll(() => testBucket.create());
afterAll(() => testBucket.remove());

const pointer = { layout: 'pointer' } as const;
/** A grace period the tests wait out for real (they sleep past it; nothing asserts on time). */
const GRACE_MS = 300;
const LONG_GRACE_MS = 60 * 60 * 1000;

const dataObjects = (Key: string): Promise<string[]> => testBucket.keys(`${Key}.fencekeeper/`);

async function read(Key: string, client = admin): Promise<{ text: string; token: bigint | null } | null> {
  const out = await fencedGetObject(client, { Bucket, Key });
  return out === null ? null : { text: await out.Body!.transformToString(), token: out.token };
}

async function write(Key: string, text: string, token: bigint): Promise<string> {
  return (await fencedPutObject(admin, { Bucket, Key, Body: text, token }, pointer)).dataKey!;
}

describe('collectGarbage', () => {
  it('removes superseded data objects only once unreferenced for the grace period; never the current one, however old', async () => {
    const Key = `${randomPrefix()}/report`;
    const d1 = await write(Key, 'v1', 1n);
    const d2 = await write(Key, 'v2', 1n);
    const d3 = await write(Key, 'v3', 1n);

    // The generation began with the first write, well within an hour: a reader
    // may still hold a pointer to d1 or d2.
    expect(await collectGarbage(admin, { Bucket, Key }, { graceMs: LONG_GRACE_MS })).toEqual({ deleted: [], generation: 1 });

    // Past the grace: the collector starts generation 2 (d3 carried into it).
    // d1 and d2 were superseded at some moment it cannot know, so they are kept
    // for a full grace period from now.
    await sleep(GRACE_MS + 50);
    expect(await collectGarbage(admin, { Bucket, Key }, { graceMs: GRACE_MS })).toEqual({ deleted: [], generation: 2 });
    expect(await collectGarbage(admin, { Bucket, Key }, { graceMs: LONG_GRACE_MS })).toEqual({ deleted: [], generation: 2 });
    expect(await dataObjects(Key)).toEqual([d1, d2, d3].sort());

    await sleep(GRACE_MS + 50);
    const third = await collectGarbage(admin, { Bucket, Key }, { graceMs: GRACE_MS });
    expect([...third.deleted].sort()).toEqual([d1, d2].sort());
    expect(third.generation).toBe(3);
    // d3 is the oldest object left and past any age limit; it is current, so it stays.
    expect(await dataObjects(Key)).toEqual([d3]);
    expect(await read(Key)).toEqual({ text: 'v3', token: 1n });

    // d3 was current when generation 3 began (carried): kept through it, gone after.
    const d4 = await write(Key, 'v4', 2n);
    await sleep(GRACE_MS + 50);
    expect(await collectGarbage(admin, { Bucket, Key }, { graceMs: GRACE_MS })).toEqual({ deleted: [], generation: 4 });
    await sleep(GRACE_MS + 50);
    expect(await collectGarbage(admin, { Bucket, Key }, { graceMs: GRACE_MS })).toEqual({ deleted: [d3], generation: 5 });
    expect(await dataObjects(Key)).toEqual([d4]);
    expect(await read(Key)).toEqual({ text: 'v4', token: 2n });
  });

  it('a writer paused between its data object and the pointer: the collector never removes what it may still name', async () => {
    const Key = `${randomPrefix()}/paused-writer`;
    await write(Key, 'v1', 1n);
    const writerAtPointer = new Gate();
    const resumeWriter = new Gate();
    const writer = fencedPutObject(newClient().client, { Bucket, Key, Body: 'by the paused writer', token: 2n }, {
      ...pointer,
      beforePut: async () => {
        writerAtPointer.open();
        await resumeWriter.wait();
      },
    });
    await writerAtPointer.wait(); // its data object exists; the pointer still names v1's

    // The collector lists and deletes, and is held right before it starts the next generation.
    const gc = newClient();
    const resumeCollector = new Gate();
    const collectorAtPointer = holdRequests(gc.client, (r) => r.method === 'PUT' && r.path === `/${Bucket}/${Key}`, () => resumeCollector.wait());
    const collecting = collectGarbage(gc.client, { Bucket, Key }, { graceMs: 0 });
    await collectorAtPointer.wait();

    resumeWriter.open(); // the writer's If-Match still holds: its pointer lands
    const written = await writer;
    resumeCollector.open(); // the collector's If-Match fails, it reads again and advances
    const collected = await collecting;

    expect(collected.deleted).not.toContain(written.dataKey);
    expect(collected.generation).toBe(2);
    expect(gc.seen.filter((r) => r.method === 'PUT').map((r) => r.status)).toEqual([412, 200]);
    expect(await read(Key)).toEqual({ text: 'by the paused writer', token: 2n });
    gc.client.destroy();
  });

  it("a writer whose read is older than the collector's generation writes a fresh data object instead of naming a collected one", async () => {
    const Key = `${randomPrefix()}/old-read`;
    await write(Key, 'v1', 1n);
    const w = newClient();
    const collected: string[] = [];
    let firstDataKey = '';
    const written = await fencedPutObject(w.client, { Bucket, Key, Body: 'by w', token: 2n }, {
      ...pointer,
      beforePut: async () => {
        if (firstDataKey !== '') return;
        firstDataKey = (await dataObjects(Key)).find((k) => k.includes('0000000000000000002-'))!;
        // While w is paused: two collections, the second removes w's data object (generation 1).
        for (let i = 0; i < 2; i += 1) collected.push(...(await collectGarbage(admin, { Bucket, Key }, { graceMs: 0 })).deleted);
      },
    });
    expect(collected).toContain(firstDataKey);
    expect(written.dataKey).not.toBe(firstDataKey);
    expect(written.dataKey).toMatch(/\/0000000000000000002-3-/); // written anew in the pointer's generation
    expect(await read(Key)).toEqual({ text: 'by w', token: 2n });
    w.client.destroy();
  });

  it("a data PUT's reply lost, then the object collected before the writer could see it: the writer reads the pointer again and writes anew", async () => {
    const Key = `${randomPrefix()}/lost-data-reply`;
    await write(Key, 'v1', 1n);
    const w = await proxiedClient();
    // The data PUT lands and its reply is lost (the proxy resets the
    // connection); the writer sends it again: 412, the name exists. Its HEAD
    // of that name is held while the collector runs twice (generation 1 to 3,
    // removing the writer's generation-1 object), then goes out.
    w.proxy.loseReplyTo('body of the lost reply');
    const resumeHead = new Gate();
    const headHeld = holdRequests(w.client, (r) => r.method === 'HEAD' && r.path.includes('.fencekeeper/'), () => resumeHead.wait());
    const writing = fencedPutObject(w.client, { Bucket, Key, Body: 'body of the lost reply', token: 2n }, pointer);
    await headHeld.wait();
    const firstDataKey = (await dataObjects(Key)).find((k) => k.includes('/0000000000000000002-1-'))!;
    const collected: string[] = [];
    for (let i = 0; i < 2; i += 1) collected.push(...(await collectGarbage(admin, { Bucket, Key }, { graceMs: 0 })).deleted);
    expect(collected).toEqual([firstDataKey]);
    resumeHead.open();

    const written = await writing;
    expect(w.proxy.repliesLost).toBe(1);
    expect(w.seen.map((r) => `${r.method} ${r.status}`)).toEqual([
      'HEAD 200', // the pointer, generation 1
      'PUT -1', 'PUT 412', 'HEAD 404', // the data object: reply lost, exists, then collected
      'HEAD 200', // the pointer again, generation 3
      'PUT 200', 'PUT 200', // a fresh data object, the pointer
    ]);
    expect(written.dataKey).toMatch(/\/0000000000000000002-3-/);
    expect(await read(Key)).toEqual({ text: 'body of the lost reply', token: 2n });
    w.client.destroy();
    await w.proxy.close();
  });

  it('a reader holding an old pointer while its data object is collected reads the pointer again', async () => {
    const Key = `${randomPrefix()}/reader`;
    const d1 = await write(Key, 'v1', 1n);
    const reader = newClient();
    const resumeReader = new Gate();
    let held = 0;
    const readerAtData = holdRequests(
      reader.client,
      (r) => r.method === 'GET' && r.path.includes('.fencekeeper/'),
      () => (held++ === 0 ? resumeReader.wait() : Promise.resolve()),
    );
    const reading = read(Key, reader.client);
    await readerAtData.wait(); // it has the pointer naming d1

    await write(Key, 'v2', 2n);
    const deleted: string[] = [];
    for (let i = 0; i < 2; i += 1) deleted.push(...(await collectGarbage(admin, { Bucket, Key }, { graceMs: 0 })).deleted);
    expect(deleted).toContain(d1);

    resumeReader.open();
    expect(await reading).toEqual({ text: 'v2', token: 2n });
    const gets = reader.seen.filter((r) => r.method !== 'GET' || r.path.includes('.fencekeeper/')).map((r) => `${r.method} ${r.status}`);
    expect(gets).toEqual(['GET 404', 'HEAD 200', 'GET 200']);
    reader.client.destroy();
  });

  it('writers, readers and a collector with no grace, all at once: every read is a whole version, the pointer never dangles', async () => {
    const Key = `${randomPrefix()}/busy`;
    const WRITERS = 8;
    const WRITES = 12;
    const writers = Array.from({ length: WRITERS }, () => newClient());
    let writing = true;
    let reads = 0;
    let deleted = 0;
    const readers = Array.from({ length: 3 }, async () => {
      const client = newClient().client;
      while (writing) {
        const got = await read(Key, client);
        if (got !== null) {
          expect(got.text).toBe(`token ${got.token}`); // the body of the very write the pointer named
          reads += 1;
        }
      }
      client.destroy();
    });
    const collector = (async () => {
      const client = newClient().client;
      while (writing) deleted += (await collectGarbage(client, { Bucket, Key }, { graceMs: 0 })).deleted.length;
      client.destroy();
    })();
    // WRITES rounds at least, and on until the collector has deleted while
    // writes go on (on a fast run all of them can land before its first pass).
    let largest = 0n;
    await Promise.all(writers.map(async (w, i) => {
      for (let j = 0; j < WRITES || (deleted === 0 && j < 50 * WRITES); j += 1) {
        const token = BigInt(1 + j * WRITERS + i);
        if (token > largest) largest = token;
        await fencedPutObject(w.client, { Bucket, Key, Body: `token ${token}`, token }, { ...pointer, maxAttempts: 100 })
          .catch((error: unknown) => expect((error as { code?: string }).code).toBe('STALE_TOKEN'));
      }
    }));
    writing = false;
    await Promise.all([...readers, collector]);
    expect(reads).toBeGreaterThan(0);
    expect(deleted).toBeGreaterThan(0);

    expect(await read(Key)).toEqual({ text: `token ${largest}`, token: largest });
    for (let i = 0; i < 2; i += 1) await collectGarbage(admin, { Bucket, Key }, { graceMs: 0 });
    expect((await dataObjects(Key)).map((k) => k.split('/').pop()!.slice(0, 19))).toEqual([String(largest).padStart(19, '0')]);

    // A fenced delete: after two collections nothing of the data is left, the fence is.
    await fencedDeleteObject(admin, { Bucket, Key, token: largest }, pointer);
    for (let i = 0; i < 2; i += 1) await collectGarbage(admin, { Bucket, Key }, { graceMs: 0 });
    expect(await dataObjects(Key)).toEqual([]);
    expect(await readFence(admin, { Bucket, Key })).toBe(largest);
    for (const w of writers) w.client.destroy();
  });

  it("objects under the data prefix that its metadata does not mark as the name's data object stay: the collector HEADs each candidate first", async () => {
    const Key = `${randomPrefix()}/not-data`;
    const d1 = await write(Key, 'v1', 1n);
    const d2 = await write(Key, 'v2', 1n);
    // Three objects whose names spell data objects of generation 1, none of them one:
    // an object carrying its own fence (token 7), as fencedPutObject wrote one in
    // place before the data prefix was refused to fenced writes;
    const fenced = `${Key}.fencekeeper/0000000000000000007-1-${randomUUID()}`;
    await admin.send(new PutObjectCommand({ Bucket, Key: fenced, Body: 'fence 7', Metadata: { 'fencing-token': '7', 'fencing-write': randomUUID() } }));
    // a copy of a real data object under another write id's name;
    const copied = `${Key}.fencekeeper/0000000000000000001-1-${randomUUID()}`;
    await admin.send(new CopyObjectCommand({ Bucket, Key: copied, CopySource: `${Bucket}/${d1}` }));
    // and an object written without fencing.
    const plain = `${Key}.fencekeeper/0000000000000000001-1-${randomUUID()}`;
    await admin.send(new PutObjectCommand({ Bucket, Key: plain, Body: 'plain' }));

    const gc = newClient();
    const deleted: string[] = [];
    for (let i = 0; i < 2; i += 1) deleted.push(...(await collectGarbage(gc.client, { Bucket, Key }, { graceMs: 0 })).deleted);
    expect(deleted).toEqual([d1]);
    expect(await dataObjects(Key)).toEqual([copied, d2, fenced, plain].sort());
    expect(await readFence(admin, { Bucket, Key: fenced })).toBe(7n); // the fence did not go back
    // The cost: one HEAD per candidate of the second pass (d2 is current, so no HEAD), one DELETE.
    const inPrefix = gc.seen.filter((r) => r.path.includes('.fencekeeper/')).map((r) => r.method);
    expect(inPrefix.filter((m) => m === 'HEAD')).toHaveLength(4);
    expect(inPrefix.filter((m) => m === 'DELETE')).toHaveLength(1);
    expect(await read(Key)).toEqual({ text: 'v2', token: 1n });
    gc.client.destroy();
  });

  it('bad input and other keys: a clear error, nothing removed', async () => {
    const { client, seen } = newClient();
    const Key = `${randomPrefix()}/input`;
    const untyped = collectGarbage as (c: typeof client, input: object, options?: object) => Promise<unknown>;
    await expectRejects(untyped(client, { Key }), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key: '' }), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key }, { graceMs: -1 }), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key }, { graceMs: Number.NaN }), InvalidArgumentError);
    await expectRejects(untyped(client, { Bucket, Key: `${Key}.fencekeeper/x` }), InvalidArgumentError);
    expect(seen).toEqual([]);

    expect(await collectGarbage(client, { Bucket, Key }, { graceMs: 0 })).toEqual({ deleted: [], generation: null });

    const inPlace = `${randomPrefix()}/in-place`;
    await fencedPutObject(admin, { Bucket, Key: inPlace, Body: 'x', token: 1n });
    const error = await expectRejects(collectGarbage(client, { Bucket, Key: inPlace }, { graceMs: 0 }), LayoutMismatchError);
    expect(error.found).toBe('in-place');

    // Something else under the data prefix is not ours to remove.
    await write(Key, 'v1', 1n);
    const stray = `${Key}.fencekeeper/notes.txt`;
    await admin.send(new PutObjectCommand({ Bucket, Key: stray, Body: 'not a data object' }));
    await write(Key, 'v2', 1n);
    for (let i = 0; i < 2; i += 1) await collectGarbage(client, { Bucket, Key }, { graceMs: 0 });
    expect(await testBucket.exists(stray)).toBe(true);
    expect(await dataObjects(Key)).toHaveLength(2); // v2's data and the stray
    client.destroy();
  });
});
