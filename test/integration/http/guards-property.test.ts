// The guards table's property test: arbitrary fencing-token and
// Idempotency-Key headers (any count of occurrences, any case of the name,
// values of printable ASCII and Latin-1, near-tokens, near-sequencers,
// near-keys, commas, whitespace) sent to every guard of the table
// (guards.ts: Express 5 and 4, Fastify 5, Hono over node-server, Fetch
// direct), each the same sequence of requests so their stores move alike.
// For every input: no guard answers 5xx, a token is admitted only when it
// was sent once and is a token, a key is used only when it was sent once and
// is a key, and every guard gives the same status, problem type and code.
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatSequencer, parseFencing } from '../../../src/index.js';
import { parseIdempotencyKey } from '../../../src/shared/http/idempotency/key.js';
import { allGuards, type Answer, type Guard, type Input } from './guards.js';

const guards: Guard[] = [];
beforeAll(async () => {
  guards.push(...(await allGuards()));
});
afterAll(async () => {
  for (const guard of guards) await guard.close();
});

/** A header value as both a socket and a Fetch Headers object carry it: HTAB, SP..~ and Latin-1 (no other control characters: Node's parser refuses them itself). */
const valueChar = fc.oneof(
  { weight: 8, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
  { weight: 1, arbitrary: fc.constant(0x09) },
  { weight: 1, arbitrary: fc.integer({ min: 0xa0, max: 0xff }) },
).map((code) => String.fromCharCode(code));
const anyText = fc.array(valueChar, { maxLength: 40 }).map((chars) => chars.join(''));
const digits = fc.stringMatching(/^[0-9]{1,20}$/);
const near = (core: fc.Arbitrary<string>): fc.Arbitrary<string> =>
  fc.tuple(fc.constantFrom('', ' ', '\t', '+', '-', '0', ','), core, fc.constantFrom('', ' ', '\t', ',', ', 1', '.0', ';a=1')).map(([a, b, c]) => a + b + c);
const tokenText = fc.oneof(
  fc.bigInt({ min: 1n, max: 9223372036854775807n }).map(String),
  fc.constantFrom('0', '666', '9223372036854775807', '9223372036854775808', '1e3', '0x10', ''),
  near(digits),
  fc.bigInt({ min: 1n, max: 1000n }).map((token) => formatSequencer({ kind: 'lock', name: 'table-lock', source: { kind: 'zookeeper', id: 'table' }, token })),
  near(fc.constantFrom('fk1:lock:zookeeper:table:7:table-lock', 'fk1:lock:zookeeper:other:7:table-lock', 'fk1:lock:zookeeper:table::table-lock', 'fk1:')),
  anyText,
);
const keyText = fc.oneof(
  fc.uuid().map((uuid) => `"${uuid}"`),
  fc.stringMatching(/^[A-Za-z0-9._~:+/=-]{1,12}$/),
  near(fc.stringMatching(/^"[ -~]{0,12}"$/)),
  fc.constantFrom('"a", "b"', '"a,b"', 'a,b', '"a";p=1', '"a";P=1', '""', '"', `"${'k'.repeat(256)}"`),
  anyText,
);
/** A header name as a client may spell it. */
const spelled = (name: string): fc.Arbitrary<string> =>
  fc.array(fc.boolean(), { minLength: name.length, maxLength: name.length }).map((upper) => [...name].map((c, i) => (upper[i] ? c.toUpperCase() : c)).join(''));
const occurrences = (name: string, value: fc.Arbitrary<string>) =>
  fc.array(fc.tuple(spelled(name), value), { maxLength: 3 }).map((list) => list as (readonly [string, string])[]);

/** What a server sees of a value: optional whitespace (SP, HTAB) around it dropped. */
const trimmed = (value: string): string => value.replace(/^[ \t]+|[ \t]+$/g, '');

interface Seen {
  readonly status: number;
  readonly type?: unknown;
  readonly code?: unknown;
  readonly contentType?: string | undefined;
}

function seen(answer: Answer): Seen {
  if (answer.status < 300) return { status: answer.status };
  let problem: { type?: unknown; code?: unknown } = {};
  try {
    problem = JSON.parse(answer.body) as typeof problem;
  } catch {
    // Left empty: the comparison across guards shows it.
  }
  return { status: answer.status, type: problem.type, code: problem.code, contentType: answer.headers['content-type'] };
}

async function sendAll(input: Input): Promise<{ name: string; seen: Seen }[]> {
  const out: { name: string; seen: Seen }[] = [];
  for (const guard of guards) out.push({ name: guard.name, seen: seen(await guard.send(input)) });
  return out;
}

function parsesAsFencing(value: string): boolean {
  if (value.includes(',')) return false;
  try {
    parseFencing(value);
    return true;
  } catch {
    return false;
  }
}

describe('every HTTP guard, fuzzed headers', () => {
  it('fencing-token: never a 5xx, never a malformed or repeated token admitted, the same answer from every guard', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom('/fence/p1', '/fence/p2', '/bound'), occurrences('fencing-token', tokenText), async (path, headers) => {
        const answers = await sendAll({ method: 'PUT', path, headers });
        const first = answers[0]!.seen;
        for (const { name, seen } of answers) {
          expect(seen.status, `${name}: ${JSON.stringify(headers)}`).toBeLessThan(500);
          expect(seen, `${name} vs ${answers[0]!.name}: ${JSON.stringify(headers)}`).toEqual(first);
          if (seen.status >= 400) expect([seen.type, seen.contentType], name).toEqual(['about:blank', 'application/problem+json']);
        }
        if (first.status === 200) {
          expect(headers.length, `admitted ${JSON.stringify(headers)}`).toBe(1);
          expect(parsesAsFencing(trimmed(headers[0]![1])), `admitted ${JSON.stringify(headers)}`).toBe(true);
        }
      }),
      { numRuns: 150 },
    );
  }, 180_000);

  it('Idempotency-Key: never a 5xx, never a malformed or repeated key used, the same answer from every guard', async () => {
    await fc.assert(
      fc.asyncProperty(occurrences('idempotency-key', keyText), fc.constantFrom('one', 'two', 'x'.repeat(17)), async (keys, body) => {
        const headers = [...keys, ['content-type', 'text/plain'] as const];
        const answers = await sendAll({ method: 'POST', path: '/idem', headers, body });
        const first = answers[0]!.seen;
        for (const { name, seen } of answers) {
          expect(seen.status, `${name}: ${JSON.stringify(keys)}`).toBeLessThan(500);
          expect(seen, `${name} vs ${answers[0]!.name}: ${JSON.stringify(keys)} ${body}`).toEqual(first);
          if (seen.status >= 400) expect([seen.type, seen.contentType], name).toEqual(['about:blank', 'application/problem+json']);
        }
        // A key that is no key, or is sent twice, never reaches the store: the route then answers 400, never 201/422/409.
        const usable = keys.length === 1 && parseIdempotencyKey(trimmed(keys[0]![1])).ok;
        if (keys.length > 0 && !usable) expect(first.status, JSON.stringify(keys)).toBe(400);
      }),
      { numRuns: 150 },
    );
  }, 180_000);
});
