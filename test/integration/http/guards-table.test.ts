// One table of requests run against every HTTP guard: Express 5, Express 4,
// Fastify 5, Hono over @hono/node-server, and the Fetch guard called directly
// with Request objects (test/integration/http/guards.ts serves them). Each
// must give the same status, problem type and code, and the same headers
// fencekeeper sets (content-type and cache-control of a problem,
// idempotent-replayed of a replay) for the same input.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_REQUEST_BYTES, allGuards, slow, type Guard, type Input } from './guards.js';

/** The table: each row's input, and what every guard must answer. */
const ROWS: readonly { readonly name: string; readonly input: Input; readonly status: number; readonly code?: string; readonly replayed?: boolean; readonly body?: string; readonly fields?: Record<string, unknown> }[] = [
  { name: 'admitted', input: { method: 'PUT', path: '/fence/a', headers: [['fencing-token', '10']] }, status: 200, body: 'ok' },
  { name: 'equal token again', input: { method: 'PUT', path: '/fence/a', headers: [['Fencing-Token', '10']] }, status: 200, body: 'ok' },
  { name: 'missing', input: { method: 'PUT', path: '/fence/a', headers: [] }, status: 428, code: 'MISSING_TOKEN' },
  { name: 'malformed', input: { method: 'PUT', path: '/fence/a', headers: [['fencing-token', '1e3']] }, status: 400, code: 'INVALID_TOKEN' },
  { name: 'malformed (sign)', input: { method: 'PUT', path: '/fence/a', headers: [['fencing-token', '+11']] }, status: 400, code: 'INVALID_TOKEN' },
  { name: 'malformed (too large)', input: { method: 'PUT', path: '/fence/a', headers: [['fencing-token', '9223372036854775808']] }, status: 400, code: 'INVALID_TOKEN' },
  { name: 'repeated', input: { method: 'PUT', path: '/fence/a', headers: [['fencing-token', '11'], ['FENCING-TOKEN', '11']] }, status: 400, code: 'REPEATED_TOKEN' },
  { name: 'stale', input: { method: 'PUT', path: '/fence/a', headers: [['fencing-token', '9']] }, status: 409, code: 'STALE_TOKEN', fields: { resource: 'table/a', presented: '9', current: '10' } },
  // Routes without verify on MemoryFenceStore: admitted, or refused, in the same tick (no promise).
  { name: 'admitted without verify', input: { method: 'PUT', path: '/slow/n', headers: [['fencing-token', '10']] }, status: 200, body: 'ok' },
  { name: 'stale without verify', input: { method: 'PUT', path: '/slow/n', headers: [['fencing-token', '9']] }, status: 409, code: 'STALE_TOKEN', fields: { resource: 'table/n', presented: '9', current: '10' } },
  { name: 'forged (verify refuses)', input: { method: 'PUT', path: '/fence/b', headers: [['fencing-token', '666']] }, status: 403, code: 'TOKEN_REFUSED' },
  { name: 'sequencer mismatch (bare token on a bound fence)', input: { method: 'PUT', path: '/bound', headers: [['fencing-token', '5']] }, status: 409, code: 'SEQUENCER_MISMATCH', fields: { resource: 'table/bound' } },
  { name: 'handler throws before sending: the framework\'s 500', input: { method: 'PUT', path: '/throw/t', headers: [['fencing-token', '20']] }, status: 500, body: 'failed' },
  { name: 'after the throw: the fence was released', input: { method: 'PUT', path: '/fence/t', headers: [['fencing-token', '20']] }, status: 200, body: 'ok' },
  { name: 'after the throw: the mark was kept', input: { method: 'PUT', path: '/fence/t', headers: [['fencing-token', '19']] }, status: 409, code: 'STALE_TOKEN', fields: { current: '20' } },
  { name: 'idempotency: first', input: { method: 'POST', path: '/idem', headers: [['idempotency-key', '"k1"'], ['content-type', 'text/plain']], body: 'one' }, status: 201, body: 'got:one' },
  { name: 'idempotency: replay', input: { method: 'POST', path: '/idem', headers: [['idempotency-key', '"k1"'], ['content-type', 'text/plain']], body: 'one' }, status: 201, body: 'got:one', replayed: true },
  { name: 'idempotency: another body', input: { method: 'POST', path: '/idem', headers: [['idempotency-key', '"k1"'], ['content-type', 'text/plain']], body: 'two' }, status: 422, code: 'IDEMPOTENCY_KEY_REUSED' },
  { name: 'idempotency: oversize body', input: { method: 'POST', path: '/idem', headers: [['idempotency-key', '"k2"'], ['content-type', 'text/plain']], body: 'x'.repeat(MAX_REQUEST_BYTES + 1) }, status: 413, code: 'IDEMPOTENCY_BODY_TOO_LARGE' },
  { name: 'idempotency: repeated key', input: { method: 'POST', path: '/idem', headers: [['idempotency-key', 'a'], ['idempotency-key', 'b'], ['content-type', 'text/plain']], body: 'x' }, status: 400, code: 'IDEMPOTENCY_KEY_REPEATED' },
  { name: 'idempotency: malformed key', input: { method: 'POST', path: '/idem', headers: [['idempotency-key', '"open'], ['content-type', 'text/plain']], body: 'x' }, status: 400, code: 'IDEMPOTENCY_KEY_INVALID' },
];

const guards: Guard[] = [];
beforeAll(async () => {
  guards.push(...(await allGuards()));
});
afterAll(async () => {
  for (const guard of guards) await guard.close();
});

describe('every HTTP guard answers the table alike', () => {
  it('the same status, problem type and code, and the headers fencekeeper sets, row by row', async () => {
    const failures: string[] = [];
    for (const guard of guards) {
      for (const row of ROWS) {
        const answer = await guard.send(row.input);
        const where = `${guard.name} / ${row.name}`;
        if (answer.status !== row.status) failures.push(`${where}: status ${answer.status}, expected ${row.status} (${answer.body.slice(0, 120)})`);
        if (row.code !== undefined) {
          let problem: Record<string, unknown> = {};
          try {
            problem = JSON.parse(answer.body) as Record<string, unknown>;
          } catch {
            failures.push(`${where}: not JSON: ${answer.body.slice(0, 80)}`);
          }
          if (problem.type !== 'about:blank' || problem.code !== row.code || problem.status !== row.status) failures.push(`${where}: problem ${JSON.stringify(problem)}`);
          for (const [field, value] of Object.entries(row.fields ?? {})) if (problem[field] !== value) failures.push(`${where}: ${field} ${String(problem[field])}, expected ${String(value)}`);
          if (answer.headers['content-type'] !== 'application/problem+json') failures.push(`${where}: content-type ${answer.headers['content-type']}`);
          if (answer.headers['cache-control'] !== 'no-store') failures.push(`${where}: cache-control ${answer.headers['cache-control']}`);
        } else if (row.body !== undefined && answer.body !== row.body) failures.push(`${where}: body ${JSON.stringify(answer.body)}`);
        const replayed = answer.headers['idempotent-replayed'];
        if ((replayed === 'true') !== (row.replayed === true)) failures.push(`${where}: idempotent-replayed ${String(replayed)}`);
        if (row.replayed === true && answer.headers.etag !== '"e1"') failures.push(`${where}: replayed etag ${String(answer.headers.etag)}`);
      }
    }
    expect(failures).toEqual([]);
  });

  it('two concurrent admissions of one resource never overlap, under every guard', async () => {
    for (const guard of guards) {
      const input: Input = { method: 'PUT', path: '/slow/s', headers: [['fencing-token', '1']] };
      const before = slow.get(guard.name)?.runs ?? 0; // (the table's rows on /slow ran it too)
      const answers = await Promise.all([guard.send(input), guard.send(input), guard.send(input)]);
      expect(answers.map((a) => a.status), guard.name).toEqual([200, 200, 200]);
      expect(slow.get(guard.name), guard.name).toEqual({ inside: 0, overlapped: false, runs: before + 3 });
    }
  });
});
