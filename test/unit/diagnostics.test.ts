// The channel layer on its own: names are the documented ones, a helper with
// no subscriber calls straight through (the very promise the operation
// returned: nothing wrapped, nothing published), and with a subscriber every
// tracing channel sees start/end/asyncStart/asyncEnd with its context, the
// result or the error, and may run the operation inside its own scope.
import diagnostics from 'node:diagnostics_channel';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  CHANNELS,
  RUN_WITHIN,
  TRACING_CHANNELS,
  publishRefused,
  publishSessionState,
  publishUnknownOutcome,
  traceAcquire,
  traceAdmit,
  traceCampaign,
  traceEffect,
  traceFencedWrite,
  traceRelease,
  traceS3Delete,
  traceS3Put,
  traceWithFence,
  type TraceContext,
} from '../../src/diagnostics.js';
import { SequencerMismatchError, StaleTokenError } from '../../src/errors.js';
import * as core from '../../src/index.js';

const helpers: [string, (fn: () => Promise<unknown>) => Promise<unknown>, Record<string, unknown>][] = [
  [CHANNELS.lockAcquire, (fn) => traceAcquire('zookeeper', 'jobs/a', 'wait', fn), { source: 'zookeeper', lock: 'jobs/a', mode: 'wait' }],
  [CHANNELS.lockRelease, (fn) => traceRelease('zookeeper', 'jobs/a', 7n, fn), { source: 'zookeeper', lock: 'jobs/a', token: 7n }],
  [CHANNELS.electionCampaign, (fn) => traceCampaign('etcd', 'leader', fn), { source: 'etcd', election: 'leader' }],
  [CHANNELS.fenceAdmit, (fn) => traceAdmit('express', 'orders', 7n, fn), { adapter: 'express', resource: 'orders', token: 7n }],
  [CHANNELS.fenceWithFence, (fn) => traceWithFence('postgres', 'orders', 7n, fn), { adapter: 'postgres', resource: 'orders', token: 7n }],
  [CHANNELS.fenceWrite, (fn) => traceFencedWrite('postgres', 'upsert', 'orders', 7n, fn), { adapter: 'postgres', operation: 'upsert', resource: 'orders', token: 7n }],
  [CHANNELS.s3Put, (fn) => traceS3Put('bucket/key', 7n, 'pointer', fn), { adapter: 's3', resource: 'bucket/key', token: 7n, layout: 'pointer' }],
  [CHANNELS.s3Delete, (fn) => traceS3Delete('bucket/key', 7n, 'in-place', fn), { adapter: 's3', resource: 'bucket/key', token: 7n, layout: 'in-place' }],
  [CHANNELS.effectRun, (fn) => traceEffect('payments', 'charge-1', 7n, fn), { resource: 'payments', key: 'charge-1', token: 7n }],
];

describe('diagnostics channels', () => {
  it('the names are the documented, stable ones, and the core exports them', () => {
    expect(Object.values(CHANNELS).every((n) => /^fencekeeper:[a-z0-9]+:[a-z-]+$/.test(n))).toBe(true);
    expect(CHANNELS.postgresCommitFailed).toBe('fencekeeper:postgres:commit-failed');
    expect(CHANNELS.expressStoreFailed).toBe('fencekeeper:express:store-failed');
    expect(CHANNELS.zookeeperState).toBe('fencekeeper:zookeeper:state');
    expect(CHANNELS.zookeeperWatch).toBe('fencekeeper:zookeeper:watch');
    expect(CHANNELS.lockAcquire).toBe('fencekeeper:lock:acquire');
    expect(CHANNELS.lockLost).toBe('fencekeeper:lock:lost');
    expect(CHANNELS.sessionState).toBe('fencekeeper:session:state');
    expect(CHANNELS.fenceRefused).toBe('fencekeeper:fence:refused');
    expect(CHANNELS.s3UnknownOutcome).toBe('fencekeeper:s3:unknown-outcome');
    expect(new Set(TRACING_CHANNELS)).toEqual(new Set(helpers.map(([name]) => name)));
    expect(core.CHANNELS).toBe(CHANNELS);
  });

  it.each(helpers)('%s: unsubscribed, the helper returns the operation\'s own promise', async (_name, traced) => {
    const own = Promise.resolve('value');
    expect(traced(() => own)).toBe(own);
    await own;
  });

  it.each(helpers)('%s: subscribed, the events carry the context, then the result', async (name, traced, fields) => {
    const events: [string, Record<string, unknown>][] = [];
    const channel = diagnostics.tracingChannel(name);
    const record = (kind: string) => (message: unknown) => void events.push([kind, { ...(message as Record<string, unknown>) }]);
    const subscriber = { start: record('start'), end: record('end'), asyncStart: record('asyncStart'), asyncEnd: record('asyncEnd'), error: record('error') };
    channel.subscribe(subscriber);
    try {
      await expect(traced(async () => 'value')).resolves.toBe('value');
      expect(events.map(([kind]) => kind)).toEqual(['start', 'end', 'asyncStart', 'asyncEnd']);
      expect(events[0]![1]).toEqual(fields);
      expect(events[3]![1]).toEqual({ ...fields, result: 'value' });

      events.length = 0;
      const failure = new Error('refused');
      await expect(traced(() => Promise.reject(failure))).rejects.toBe(failure);
      expect(events.map(([kind]) => kind)).toEqual(['start', 'end', 'error', 'asyncStart', 'asyncEnd']);
      expect(events[4]![1]).toEqual({ ...fields, error: failure });
    } finally {
      channel.unsubscribe(subscriber);
    }
  });

  it('a start subscriber that sets RUN_WITHIN runs the operation inside it', async () => {
    const channel = diagnostics.tracingChannel(CHANNELS.fenceWithFence);
    let inside = false;
    const subscriber = {
      start: (message: unknown) => {
        (message as TraceContext)[RUN_WITHIN] = <T>(fn: () => T): T => {
          inside = true;
          try {
            return fn();
          } finally {
            inside = false;
          }
        };
      },
      end: () => {}, asyncStart: () => {}, asyncEnd: () => {}, error: () => {},
    };
    channel.subscribe(subscriber);
    try {
      let sawInside = false;
      await traceWithFence('postgres', 'orders', 1n, async () => {
        sawInside = inside;
      });
      expect(sawInside).toBe(true);
    } finally {
      channel.unsubscribe(subscriber);
    }
  });

  it('plain channels publish their messages only to subscribers', () => {
    const seen: unknown[] = [];
    const onMessage = (m: unknown): void => void seen.push(m);
    for (const name of [CHANNELS.fenceRefused, CHANNELS.sessionState, CHANNELS.s3UnknownOutcome]) diagnostics.subscribe(name, onMessage);
    try {
      publishRefused('s3', new StaleTokenError('bucket/key', 3n, 9n));
      const bound = { kind: 'lock', lock: 'jobs/a', source: { kind: 'zookeeper', id: 'z1' } };
      publishRefused('postgres', new SequencerMismatchError('orders', bound, null), 7n);
      publishRefused('express', new SequencerMismatchError('orders', bound, { kind: 'election', lock: 'jobs/a', source: bound.source, token: 8n }), 8n);
      publishSessionState('zookeeper', '0x1', 'connected', 'suspended');
      publishUnknownOutcome('bucket/key', 3n, 'landed', 2);
      expect(seen).toEqual([
        { adapter: 's3', resource: 'bucket/key', presented: 3n, current: 9n, code: 'STALE_TOKEN' },
        { adapter: 'postgres', resource: 'orders', presented: 7n, current: null, code: 'SEQUENCER_MISMATCH', bound, presentedLock: null },
        { adapter: 'express', resource: 'orders', presented: 8n, current: null, code: 'SEQUENCER_MISMATCH', bound, presentedLock: { kind: 'election', lock: 'jobs/a', source: bound.source } },
        { source: 'zookeeper', session: '0x1', previous: 'connected', state: 'suspended' },
        { resource: 'bucket/key', token: 3n, resolution: 'landed', attempts: 2 },
      ]);
    } finally {
      for (const name of [CHANNELS.fenceRefused, CHANNELS.sessionState, CHANNELS.s3UnknownOutcome]) diagnostics.unsubscribe(name, onMessage);
    }
  });

  it('CHANNELS lists every channel the code publishes, and docs/opentelemetry.md documents each', () => {
    const root = fileURLToPath(new URL('../../', import.meta.url));
    const files = (dir: string): string[] =>
      readdirSync(`${root}${dir}`).flatMap((name) => {
        const path = `${dir}/${name}`;
        if (statSync(`${root}${path}`).isDirectory()) return files(path);
        return path.endsWith('.ts') ? [path] : [];
      });
    const names = new Set<string>(Object.values(CHANNELS));
    const made: string[] = [];
    const literals: string[] = [];
    for (const file of [...files('src'), ...files('adapters')]) {
      const text = readFileSync(`${root}${file}`, 'utf8');
      // what each channel() / tracingChannel() is made from: a CHANNELS name, a variable, or a literal
      for (const match of text.matchAll(/\b(?:channel|tracingChannel)(?:<[^>]*>)?\(\s*([^)\s]+)\s*\)/g)) made.push(`${file}: ${match[1]}`);
      if (file === 'src/diagnostics.ts') continue;
      // a channel name spelled out anywhere else (Redis key names carry {braces}: not channels)
      for (const match of text.matchAll(/'fencekeeper:[a-z0-9]+:[a-z-]+'/g)) literals.push(`${file}: ${match[0]}`);
    }
    expect(literals).toEqual([]);
    const unlisted = made.filter((m) => {
      const argument = m.slice(m.indexOf(': ') + 2);
      if (argument.startsWith('CHANNELS.')) return !(argument.slice('CHANNELS.'.length) in CHANNELS);
      if (/^'.*'$/.test(argument)) return !names.has(argument.slice(1, -1));
      return !/^[a-z]\w*$/.test(argument); // a variable iterating CHANNELS / TRACING_CHANNELS (opentelemetry)
    });
    expect(unlisted).toEqual([]);
    expect(made.filter((m) => m.includes('CHANNELS.')).length).toBeGreaterThanOrEqual(Object.keys(CHANNELS).length);
    const section = readFileSync(`${root}docs/opentelemetry.md`, 'utf8');
    expect([...names].filter((name) => !section.includes(`\`${name}\``))).toEqual([]);
  });
});
