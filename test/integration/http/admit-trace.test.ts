// Every HTTP guard publishes its admissions on the `fencekeeper:fence:admit`
// tracing channel, including those it admits in the same tick: an
// uncontended request on MemoryFenceStore skips the admission's promise only
// while nobody traces admissions (a trace is of a promise), so with a
// subscriber it takes the traced path and the events carry the adapter, the
// resource and the token.
import diagnostics from 'node:diagnostics_channel';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHANNELS } from '../../../src/index.js';
import { allGuards, type Guard } from './guards.js';

const ADAPTER: Record<string, string> = { 'Express 5': 'express', 'Express 4': 'express', 'Fastify 5': 'fastify', 'Hono (node-server)': 'hono', 'Fetch (direct)': 'fetch' };

const guards: Guard[] = [];
beforeAll(async () => {
  guards.push(...(await allGuards()));
});
afterAll(async () => {
  for (const guard of guards) await guard.close();
});

describe('the admit tracing channel sees every guard\'s admissions', () => {
  it('a subscribed channel gets start and asyncEnd for an uncontended admission on MemoryFenceStore, under every guard', async () => {
    const channel = diagnostics.tracingChannel(CHANNELS.fenceAdmit);
    const seen: { event: string; adapter: unknown; resource: unknown; token: unknown }[] = [];
    const on = (event: string) => (context: unknown): void => {
      const { adapter, resource, token } = context as Record<string, unknown>;
      seen.push({ event, adapter, resource, token });
    };
    const handlers = { start: on('start'), end: () => undefined, asyncStart: () => undefined, asyncEnd: on('asyncEnd'), error: on('error') };
    channel.subscribe(handlers);
    try {
      for (const guard of guards) {
        seen.length = 0;
        // /slow has no verify: without a subscriber it is admitted in the same tick.
        const answer = await guard.send({ method: 'PUT', path: '/slow/traced', headers: [['fencing-token', '7']] });
        expect(answer.status, guard.name).toBe(200);
        const adapter = ADAPTER[guard.name];
        expect(seen, guard.name).toEqual([
          { event: 'start', adapter, resource: 'table/traced', token: 7n },
          { event: 'asyncEnd', adapter, resource: 'table/traced', token: 7n },
        ]);
      }
    } finally {
      channel.unsubscribe(handlers);
    }
  });
});
