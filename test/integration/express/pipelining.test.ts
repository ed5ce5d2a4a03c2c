// HTTP/1.1 pipelining and the fence. Node runs the handlers of pipelined
// requests as it parses them but answers in order, so a later request's
// response waits in Node's queue until the earlier one has gone out, and its
// fence stays held until then (documented, not changed). Two consequences
// are guarded: a queued response whose connection closes first is dropped by
// Node without a 'close' event, and its admission must still be settled; and
// past maxHoldMs a queued response the handler has ended is settled by its
// status, freeing the fence while the earlier response still holds the line.
import { express } from './variants.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fencing, MemoryFenceStore } from '../../../adapters/express/index.js';
import { pipeline, post, send, serve, settledYet, SpyStore, type Served } from './helpers.js';
import { deferred, type Deferred, within } from '../../helpers/wait.js';

const H = 'fencing-token';
const HOLD_MS = 300;
const SLACK_MS = 15_000;

describe('pipelined requests on one connection (MemoryFenceStore)', () => {
  const spy = new SpyStore(new MemoryFenceStore());
  const events = new Map<string, Deferred<AbortSignal>>();
  const event = (key: string): Deferred<AbortSignal> => {
    let d = events.get(key);
    if (d === undefined) events.set(key, (d = deferred<AbortSignal>()));
    return d;
  };
  const gates = new Map<string, Deferred>();
  const gate = (key: string): Deferred => {
    let d = gates.get(key);
    if (d === undefined) gates.set(key, (d = deferred()));
    return d;
  };
  const resource = (req: express.Request): string => String(req.params['id']);
  const app = express();
  // Enters, then waits for its gate before answering.
  app.post('/slow/:id', fencing({ store: spy, resource }), async (req, res) => {
    const key = req.get('x-key') ?? '';
    event(`entered ${key}`).resolve(req.fencing!.signal);
    await gate(key).promise;
    res.json({ key });
  });
  // Answers at once (the answer may then wait in Node's queue).
  const fast = (req: express.Request, res: express.Response): void => {
    const key = req.get('x-key') ?? '';
    res.json({ key });
    event(`answered ${key}`).resolve(req.fencing!.signal);
  };
  app.post('/fast/:id', fencing({ store: spy, resource }), fast);
  app.post('/fast-short/:id', fencing({ store: spy, resource, maxHoldMs: HOLD_MS }), fast);
  let served: Served;
  beforeAll(async () => {
    served = await serve(app);
  });
  afterAll(async () => {
    for (const g of gates.values()) g.resolve();
    await served.close();
  });

  const callFor = (resourceName: string, index = 0) => spy.calls.filter((c) => c.resource === resourceName)[index];

  /**
   * Pipeline `/slow/<tag>` (held at its gate) and then `<fastRoute>/<tag>-y`
   * with `token` on one connection; resolves once the slow handler has
   * started and the fast one has answered (its answer queued behind), with
   * the fast handler's signal.
   */
  async function slowThenFast(tag: string, token: string, fastRoute = '/fast') {
    const line = pipeline(served.port, [
      [`/slow/${tag}`, { [H]: token, 'x-key': `${tag}-slow` }],
      [`${fastRoute}/${tag}-y`, { [H]: token, 'x-key': `${tag}-fast` }],
    ]);
    await event(`entered ${tag}-slow`).promise;
    const queuedSignal = await event(`answered ${tag}-fast`).promise;
    return { line, queuedSignal };
  }

  it("as documented: a later request's fence stays held, though its handler has answered, until the earlier response has gone out", async () => {
    const { line } = await slowThenFast('p1', '1');
    // Another connection's request for the same resource waits for that fence.
    const other = send(served.port, '/fast/p1-y', { [H]: '1', 'x-key': 'p1-other' });
    await spy.until(() => callFor('p1-y', 1)?.outcome === 'pending');
    expect(await settledYet(other.answer)).toBe(false);
    expect(callFor('p1-y', 0)).toMatchObject({ outcome: 'admitted', settled: undefined });

    gate('p1-slow').resolve();
    expect((await other.answer).status).toBe(200);
    expect((await line.answers).map((a) => [a.status, a.body])).toEqual([
      [200, { key: 'p1-slow' }],
      [200, { key: 'p1-fast' }],
    ]);
    expect(callFor('p1-y', 0)).toMatchObject({ settled: 'commit' });
  });

  // Regression: Node drops a queued response without emitting 'close' on it
  // when the connection closes first; fencing() waited for that 'close' and
  // held the fence for good.
  it('the connection closes while a response waits in the queue: its admission is aborted and the fence freed', async () => {
    const { line, queuedSignal } = await slowThenFast('p2', '2');
    line.destroy();
    // The earlier response's 'close' (it was in flight) comes with the
    // connection's, as does whatever settles the queued one.
    await spy.until(() => callFor('p2')?.settled !== undefined);
    await new Promise((resolve) => setImmediate(resolve));
    expect(callFor('p2')).toMatchObject({ settled: 'abort' });
    expect(callFor('p2-y')).toMatchObject({ outcome: 'admitted', settled: 'abort' });
    expect(queuedSignal.aborted).toBe(true);
    expect(queuedSignal.reason).toMatchObject({ code: 'FENCE_RELEASED', reason: 'client_gone' });
    const next = await within(post(served.port, '/fast/p2-y', { [H]: '2', 'x-key': 'p2-next' }), SLACK_MS, 'the next request for p2-y');
    expect(next.status).toBe(200);
  });

  it('past maxHoldMs, a queued response the handler has ended is settled by its status (committed), the fence freed, and the response still delivered', async () => {
    const { line, queuedSignal } = await slowThenFast('p3', '3', '/fast-short');
    await within(spy.until(() => callFor('p3-y')?.settled !== undefined), HOLD_MS + SLACK_MS, 'maxHoldMs settling the queued response');
    expect(callFor('p3-y')).toMatchObject({ settled: 'commit' });
    expect(queuedSignal.aborted).toBe(false);
    // Free while the earlier response still holds the connection's line.
    const next = await within(post(served.port, '/fast/p3-y', { [H]: '3', 'x-key': 'p3-next' }), SLACK_MS, 'the next request for p3-y');
    expect(next.status).toBe(200);
    expect(callFor('p3')).toMatchObject({ settled: undefined });

    gate('p3-slow').resolve();
    expect((await line.answers).map((a) => [a.status, a.body])).toEqual([
      [200, { key: 'p3-slow' }],
      [200, { key: 'p3-fast' }],
    ]);
  });
});
