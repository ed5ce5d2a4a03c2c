// Two replicas of one Express service sharing only a Redis (FK_REDIS): each
// its own ioredis client and RedisFenceStore. The handler writes a fenced
// Redis key (fencedSet) with the admitted token. Admissions of one resource
// serialize across the replicas, a token below the shared mark is refused on
// either, and the grade RedisFenceStore states: a replica cut off from Redis
// past its lease (its renewals stuck, as a paused process's would be) loses
// the hold, the other replica's next admission runs while its handler still
// does, and what keeps the data right is the key's own fence, which refuses
// the cut-off replica's late write.
import { express, forwardRejections } from './variants.js';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { fencing } from '../../../adapters/express/index.js';
import { RedisFenceStore, fencedGet, fencedSet } from '../../../adapters/redis/index.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import { uniqueId } from '../../helpers/unique.js';
import { deferred, type Deferred } from '../../helpers/wait.js';
import { post, send, serve, settledYet, type Served } from './helpers.js';
import { hostPort, singleUrl } from '../redis/helpers.js';

const H = 'fencing-token';
const dataKey = (resource: string): string => `fk-test:replica-docs:${resource}`;

class Replica {
  readonly redis: Redis;
  readonly entered = new Map<string, Deferred>();
  readonly gates = new Map<string, Deferred>();
  served!: Served;

  constructor(readonly name: string, port: number, leaseMs: number) {
    this.redis = new Redis({ host: '127.0.0.1', port, retryStrategy: () => 50 });
    this.redis.on('error', () => {});
    const store = new RedisFenceStore(this.redis, { leaseMs });
    const app = express();
    app.post('/docs/:id', fencing({ store, resource: (req) => String(req.params['id']) }), forwardRejections(async (req, res) => {
      const f = req.fencing!;
      const note = `${this.name}:${f.token}`;
      this.#entered(f.resource, note).resolve();
      await this.gates.get(`${f.resource}/${note}`)?.promise;
      const written = await fencedSet(this.redis, dataKey(f.resource), note, f.token).then(() => 'written', (e: { code?: string }) => e.code);
      res.json({ replica: this.name, token: String(f.token), previous: f.previous === null ? null : String(f.previous), written });
    }));
    this.app = app;
  }

  readonly app: express.Express;

  #entered(resource: string, note: string): Deferred {
    const key = `${resource}/${note}`;
    let d = this.entered.get(key);
    if (d === undefined) this.entered.set(key, (d = deferred()));
    return d;
  }

  /** Send `token` behind a gate; resolves once its handler holds the fence. */
  async enter(resource: string, token: string) {
    const note = `${this.name}:${token}`;
    const gate = deferred();
    this.gates.set(`${resource}/${note}`, gate);
    const sent = send(this.served.port, `/docs/${resource}`, { [H]: token });
    await this.#entered(resource, note).promise;
    return { gate, sent };
  }

  hasEntered(resource: string, token: string): boolean {
    return this.entered.has(`${resource}/${this.name}:${token}`);
  }

  post(resource: string, token: string) {
    return post(this.served.port, `/docs/${resource}`, { [H]: token });
  }

  async close(): Promise<void> {
    await this.served?.close();
    this.redis.disconnect();
  }
}

const opened: { close(): Promise<void> }[] = [];
afterAll(async () => {
  for (const o of opened.reverse()) await o.close();
});

async function replica(name: string, port: number, leaseMs = 30_000): Promise<Replica> {
  const r = new Replica(name, port, leaseMs);
  r.served = await serve(r.app);
  opened.push(r);
  return r;
}

describe('two replicas sharing one Redis through RedisFenceStore', () => {
  const port = hostPort(singleUrl()).port;

  it('admissions of one resource serialize across the replicas: the second waits for the first to answer', async () => {
    const [a, b] = [await replica('a', port), await replica('b', port)];
    const doc = uniqueId('serial');
    const first = await a.enter(doc, '10');
    const second = send(b.served.port, `/docs/${doc}`, { [H]: '11' });
    await new Promise((r) => setTimeout(r, 500));
    expect(b.hasEntered(doc, '11')).toBe(false);
    expect(await settledYet(second.answer)).toBe(false);
    first.gate.resolve();
    expect((await first.sent.answer).body).toMatchObject({ replica: 'a', token: '10', previous: null, written: 'written' });
    expect((await second.answer).body).toMatchObject({ replica: 'b', token: '11', previous: '10', written: 'written' });
    expect(await fencedGet(a.redis, dataKey(doc))).toEqual({ value: 'b:11', token: 11n });
  });

  it('the mark is shared: a token below what one replica admitted is refused (409) by the other, and nothing is written', async () => {
    const [a, b] = [await replica('a', port), await replica('b', port)];
    const doc = uniqueId('stale');
    expect((await a.post(doc, '20')).status).toBe(200);
    const refused = await b.post(doc, '19');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ presented: '19', current: '20' });
    expect((await b.post(doc, '20')).status).toBe(200);
    expect(await fencedGet(b.redis, dataKey(doc))).toEqual({ value: 'b:20', token: 20n });
  });

  it('a live replica keeps the hold past its lease (renewed): a slow handler is not overlapped', async () => {
    const [a, b] = [await replica('a', port, 600), await replica('b', port, 600)];
    const doc = uniqueId('renewed');
    const first = await a.enter(doc, '40');
    await new Promise((r) => setTimeout(r, 1_500));
    const second = send(b.served.port, `/docs/${doc}`, { [H]: '41' });
    await new Promise((r) => setTimeout(r, 1_000));
    expect(b.hasEntered(doc, '41')).toBe(false);
    first.gate.resolve();
    expect((await first.sent.answer).body).toMatchObject({ replica: 'a', token: '40', written: 'written' });
    expect((await second.answer).body).toMatchObject({ replica: 'b', token: '41', previous: '40', written: 'written' });
  }, 60_000);

  it('the grade: a replica cut off past its lease loses the hold, the other\'s next admission overlaps its handler, and the key\'s fence refuses its late write', async () => {
    const proxy = await TcpProxy.to(`127.0.0.1:${port}`);
    opened.push(proxy);
    const a = await replica('a', proxy.port, 1_500);
    const b = await replica('b', port, 1_500);
    const doc = uniqueId('lease');
    const first = await a.enter(doc, '30');
    proxy.blackhole();
    const started = performance.now();
    // b waits for a's hold until its lease runs out (a's renewals are stuck in the black hole), then proceeds while a's handler still runs.
    const second = await b.post(doc, '31');
    expect(second.body).toMatchObject({ replica: 'b', token: '31', previous: '30', written: 'written' });
    expect(performance.now() - started).toBeGreaterThan(500);
    expect(await settledYet(first.sent.answer)).toBe(false);
    proxy.resume();
    first.gate.resolve();
    expect((await first.sent.answer).body).toMatchObject({ replica: 'a', token: '30', written: 'STALE_TOKEN' });
    expect(await fencedGet(b.redis, dataKey(doc))).toEqual({ value: 'b:31', token: 31n });
  }, 60_000);
});
