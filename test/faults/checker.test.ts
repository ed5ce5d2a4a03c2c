// The checker can fail: hand-made histories with a violation of each property
// must be reported, and a clean history must pass. (The checker of the real
// run is only worth something if it would have caught these.)
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  checkHistory,
  findTokenRegressions,
  formatReport,
  reconstructS3Chain,
  type GrantRecord,
  type AppliedWrite,
  type FaultRecord,
  type History,
  type Resource,
  type S3Attempt,
  type WriteRecord,
} from './checker.js';

const md5 = (text: string): string => createHash('md5').update(text).digest('hex');

function write(resource: Resource, id: string, token: bigint, invokedAt: number, completedAt: number | null, outcome: WriteRecord['outcome']): WriteRecord {
  return { id, worker: 1, resource, token, invokedAt, completedAt, outcome };
}

function s3Write(id: string, token: bigint, at: number, outcome: WriteRecord['outcome'], attempts: S3Attempt[]): WriteRecord {
  return { ...write('s3', id, token, at, at + 5, outcome), s3: { etag: md5(id), attempts } };
}

/** A clean history: three holders in token order, and a stale write refused everywhere. */
function cleanHistory(): { -readonly [K in keyof History]: History[K] } {
  const writes: WriteRecord[] = [];
  const applied: AppliedWrite[] = [];
  const tokens = [10n, 20n, 30n];
  tokens.forEach((token, i) => {
    const at = 1000 + i * 100;
    writes.push(write('postgres', `c${i}-pg`, token, at, at + 5, 'ok'));
    writes.push(write('http', `c${i}-http`, token, at + 10, at + 15, 'ok'));
    const precondition = i === 0 ? '*' : md5(`c${i - 1}-s3`);
    writes.push(s3Write(`c${i}-s3`, token, at + 20, 'ok', [{ precondition, status: 200 }]));
    applied.push({ id: `c${i}`, token });
  });
  // the paused holder with token 10 wakes up after 30 was acknowledged
  writes.push(write('postgres', 'stale-pg', 10n, 2000, 2005, 'refused'));
  writes.push(write('http', 'stale-http', 10n, 2010, 2015, 'refused'));
  writes.push(s3Write('stale-s3', 10n, 2020, 'refused', [{ precondition: md5('c0-s3'), status: 412 }]));
  const log = (suffix: string): AppliedWrite[] => applied.map((a) => ({ id: `${a.id}-${suffix}`, token: a.token }));
  return {
    writes,
    resources: {
      postgres: { applied: log('pg'), final: { id: 'c2-pg', token: 30n } },
      http: { applied: log('http'), final: { id: 'c2-http', token: 30n } },
      s3: { final: null, s3Final: { etag: md5('c2-s3'), writeId: 'c2-s3', token: 30n } },
    },
    faults: [{ kind: 'pause', target: 'worker 1', at: 1500, token: 10n, noticed: true }],
  };
}

describe('checkHistory', () => {
  it('passes a clean history with a fault and a refused stale write', () => {
    const history = cleanHistory();
    const result = checkHistory(history);
    expect(result.violations).toEqual([]);
    expect(result.valid).toBe(true);
    expect(result.s3Chain.map((w) => w.id)).toEqual(['c0-s3', 'c1-s3', 'c2-s3']);
    expect(formatReport(result, history)).toContain('RESULT: valid');
  });

  it('reports a stale write accepted after a larger one (apply order and real time)', () => {
    const history = cleanHistory();
    history.writes = history.writes.map((w) => (w.id === 'stale-pg' ? { ...w, outcome: 'ok' } : w));
    history.resources = {
      ...history.resources,
      postgres: {
        applied: [...(history.resources.postgres.applied ?? []), { id: 'stale-pg', token: 10n }],
        final: { id: 'stale-pg', token: 10n },
      },
    };
    const result = checkHistory(history);
    expect(result.valid).toBe(false);
    const kinds = result.violations.filter((v) => v.resource === 'postgres').map((v) => v.kind);
    expect(kinds).toContain('order');
    expect(kinds).toContain('real-time');
    expect(kinds).toContain('final-state');
    expect(formatReport(result, history).join('\n')).toMatch(/VIOLATION \[postgres\/order\] stale-pg \(token 10\) was applied after c2-pg \(token 30\)/);
  });

  it('reports a high-water mark below an applied token', () => {
    const history = cleanHistory();
    history.resources = { ...history.resources, postgres: { ...history.resources.postgres, fence: 20n } };
    expect(checkHistory(history).violations.map((v) => `${v.resource}/${v.kind}`)).toEqual(['postgres/fence']);
    history.resources = { ...history.resources, postgres: { ...history.resources.postgres, fence: 30n } };
    expect(checkHistory(history).violations).toEqual([]);
  });

  it('reports an acknowledged write missing from the resource and a refused write that changed it', () => {
    const history = cleanHistory();
    history.resources = {
      ...history.resources,
      http: {
        applied: [{ id: 'c0-http', token: 10n }, { id: 'stale-http', token: 10n }, { id: 'c2-http', token: 30n }],
        final: { id: 'c2-http', token: 30n },
      },
    };
    const kinds = checkHistory(history).violations.map((v) => `${v.resource}/${v.kind}`);
    expect(kinds).toContain('http/lost-ack'); // c1-http
    expect(kinds).toContain('http/refused-applied'); // stale-http
    expect(kinds).not.toContain('http/order'); // 10, 10, 30 never decreases
  });

  it('reports an acknowledged S3 write lost to a PUT that never saw it (a fork in the chain)', () => {
    const history = cleanHistory();
    // c2 was accepted over c0, not over c1: c1's acknowledged write was overwritten unseen.
    history.writes = history.writes.map((w) =>
      w.id === 'c2-s3' ? { ...w, s3: { etag: md5('c2-s3'), attempts: [{ precondition: md5('c0-s3'), status: 200 }] } } : w,
    );
    const result = checkHistory(history);
    expect(result.violations.map((v) => `${v.resource}/${v.kind}`)).toEqual(['s3/lost-ack']);
    expect(result.s3Chain.map((w) => w.id)).toEqual(['c0-s3', 'c2-s3']);
  });

  it('reports an S3 object written by no recorded write, and an unconditional PUT', () => {
    const unknownObject = cleanHistory();
    unknownObject.resources = { ...unknownObject.resources, s3: { final: null, s3Final: { etag: md5('someone'), writeId: 'someone', token: 40n } } };
    expect(checkHistory(unknownObject).violations.map((v) => v.kind)).toContain('s3-chain');

    const unconditional = cleanHistory();
    unconditional.writes = unconditional.writes.map((w) =>
      w.id === 'c2-s3' ? { ...w, s3: { etag: md5('c2-s3'), attempts: [{ precondition: null, status: 200 }] } } : w,
    );
    const kinds = checkHistory(unconditional).violations.map((v) => v.kind);
    expect(kinds).toContain('s3-chain');
    expect(kinds).toContain('lost-ack');
  });

  it('walks a write that landed twice (a lost reply, then a new decision) once per landing', () => {
    const a: S3Attempt[] = [{ precondition: '*', status: null }, { precondition: md5('b'), status: 200 }];
    const writes = [
      s3Write('a', 5n, 100, 'ok', a),
      s3Write('b', 5n, 110, 'ok', [{ precondition: md5('a'), status: 200 }]),
    ];
    // a's body would be identical both times, so both landings share an ETag
    const { chain, problems } = reconstructS3Chain(writes, { etag: md5('a'), writeId: 'a', token: 5n });
    expect(problems).toEqual([]);
    expect(chain.map((w) => w.id)).toEqual(['a', 'b', 'a']);
  });

  it('fails a run that injected no fault or refused no stale write, even without violations', () => {
    const noFaults = { ...cleanHistory(), faults: [] };
    const result = checkHistory(noFaults);
    expect(result.violations).toEqual([]);
    expect(result.valid).toBe(false);
    expect(result.vacuous).toEqual(['no fault was injected']);

    const noStale = cleanHistory();
    noStale.writes = noStale.writes.filter((w) => !w.id.startsWith('stale'));
    const second = checkHistory(noStale);
    expect(second.valid).toBe(false);
    expect(second.vacuous[0]).toMatch(/no stale write was refused/);
  });

  it('counts the faults per kind and cuts per resource, and passes faults that show their effect', () => {
    const history = cleanHistory();
    history.faults = [
      ...history.faults,
      { kind: 'cut', target: 'worker 2', at: 1600, connections: 1, noticed: true },
      { kind: 'kill-leader', target: 'zookeeper node 2', at: 1700 },
      { kind: 'resource-cut', target: 'worker 1', at: 1800, resource: 'postgres', write: 'c1-pg', connections: 2, noticed: true },
      { kind: 'resource-cut', target: 'worker 1', at: 1900, resource: 's3', write: 'c1-s3', connections: 1, noticed: true },
    ];
    history.required = [
      { kind: 'pause', freshHolder: true },
      { kind: 'cut' },
      { kind: 'kill-leader' },
      { kind: 'resource-cut', resource: 'postgres' },
      { kind: 'resource-cut', resource: 's3' },
    ];
    const result = checkHistory(history);
    expect(result.vacuous).toEqual([]);
    expect(result.valid).toBe(true);
    expect(result.faultsByKind).toEqual({ pause: 1, cut: 1, 'kill-leader': 1, 'resource-cut': 2 });
    expect(result.resourceCuts).toEqual({ postgres: 1, s3: 1 });
    expect(formatReport(result, history)).toContain('faults injected: 5 (pause 1, cut 1, kill-leader 1, resource-cut 2 [postgres 1, s3 1])');
  });

  it('fails a run whose cut reset no connection, named no held write, or went unnoticed', () => {
    const cases: [FaultRecord, RegExp][] = [
      [{ kind: 'cut', target: 'worker 2', at: 1600, connections: 0, noticed: true }, /cut of worker 2 at 1600 reset 0 connections: it cut nothing/],
      [{ kind: 'cut', target: 'worker 2', at: 1600, noticed: true }, /reset an unknown number of connections: it cut nothing/],
      [{ kind: 'cut', target: 'worker 2', at: 1600, connections: 1, noticed: false }, /never noticed by its victim \(no sign of it\)/],
      [{ kind: 'resource-cut', target: 'worker 1', at: 1800, resource: 'postgres', write: 'c1-s3', connections: 1, noticed: true }, /names no postgres write of the history \(c1-s3\)/],
      [{ kind: 'resource-cut', target: 'worker 1', at: 1800, resource: 'http', connections: 1, noticed: true }, /names no http write/],
      [{ kind: 'pause', target: 'worker 3', at: 1650 }, /pause of worker 3 at 1650 was never noticed by its victim \(not checked\)/],
    ];
    for (const [fault, message] of cases) {
      const history = cleanHistory();
      history.faults = [...history.faults, fault];
      const result = checkHistory(history);
      expect(result.violations).toEqual([]);
      expect(result.valid, JSON.stringify(fault, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v))).toBe(false);
      expect(result.vacuous).toHaveLength(1);
      expect(result.vacuous[0]).toMatch(message);
    }
  });

  it('fails a run that promised a fault and injected none, or could not inject one', () => {
    const history = cleanHistory();
    history.required = [{ kind: 'pause', freshHolder: true }, { kind: 'resource-cut', resource: 's3' }, { kind: 'cut' }];
    history.faults = [
      { kind: 'pause', target: 'worker 1', at: 1500, noticed: true }, // a random pause, not of a fresh holder
      { kind: 'resource-cut', target: 'worker 1', at: 1800, resource: 'postgres', write: 'c1-pg', connections: 1, noticed: true },
    ];
    history.missed = ["a cut of a worker's ZooKeeper connections: no running worker had a connected ZooKeeper session through its proxies"];
    const result = checkHistory(history);
    expect(result.valid).toBe(false);
    expect(result.vacuous).toEqual([
      'the run promised a pause of a fresh lock holder and injected none',
      'the run promised a held-then-reset s3 write and injected none',
      'the run promised a cut and injected none',
      "the nemesis could not inject a cut of a worker's ZooKeeper connections: no running worker had a connected ZooKeeper session through its proxies",
    ]);
    expect(formatReport(result, history).join('\n')).toMatch(/PROVES NOTHING: the run promised a held-then-reset s3 write and injected none/);
  });
  it('matches a promised fault by its variant: a failover in sync does not stand for one with the replica held back', () => {
    const history = cleanHistory();
    history.required = [{ kind: 'failover', variant: 'replica held back', name: 'a failover with replication held back' }];
    history.faults = [...history.faults, { kind: 'failover', target: 'redis primary -> replica', at: 1600 }];
    expect(checkHistory(history).vacuous).toEqual(['the run promised a failover with replication held back and injected none']);
    history.faults = [...history.faults, { kind: 'failover', variant: 'replica held back', target: 'redis replica -> primary', at: 1700 }];
    expect(checkHistory(history).valid).toBe(true);
  });
});

describe('token regressions (the source, apart from the resources)', () => {
  const grant = (cycle: string, token: bigint, invokedAt: number, grantedAt: number): GrantRecord => ({ worker: 1, cycle, token, invokedAt, grantedAt });

  it('finds none in rising tokens, and does not compare grants that overlap in time', () => {
    expect(findTokenRegressions([grant('a', 1n, 0, 10), grant('b', 2n, 20, 30), grant('c', 3n, 40, 50)])).toEqual([]);
    // b began its acquire before a's grant came back: nothing orders them from outside
    expect(findTokenRegressions([grant('a', 5n, 0, 10), grant('b', 4n, 5, 12)])).toEqual([]);
  });

  it('reports a token equal to or below one granted before the acquire began, against the largest earlier one', () => {
    const a = grant('a', 10n, 0, 10);
    const b = grant('b', 12n, 20, 30);
    const c = grant('c', 12n, 40, 50); // repeats b's token
    const d = grant('d', 11n, 60, 70); // below b's
    const e = grant('e', 13n, 80, 90);
    const found = findTokenRegressions([e, d, c, b, a]);
    expect(found).toEqual([
      { grant: c, earlier: b },
      { grant: d, earlier: b },
    ]);
  });

  it('keeps them out of the resources\' verdict but reports them', () => {
    const history = cleanHistory();
    history.grants = [grant('w1-0', 30n, 0, 10), grant('w2-0', 29n, 20, 30)];
    const result = checkHistory(history);
    expect(result.valid).toBe(true);
    expect(result.tokenRegressions).toHaveLength(1);
    const report = formatReport(result, history).join('\n');
    expect(report).toMatch(/TOKEN REGRESSION w2-0 was granted token 29, not above w1-0's 30/);
    expect(report).toMatch(/TOKENS: NOT monotonic: 1 of 2 grants/);
    history.grants = [grant('w1-0', 29n, 0, 10), grant('w2-0', 30n, 20, 30)];
    expect(formatReport(checkHistory(history), history).join('\n')).toMatch(/TOKENS: monotonic/);
  });
});
