// npm run compare -- --html FILE, the renderer: from a fixed report (a fake
// one is fine for a renderer: the real run is `npm run compare -- --html`), the
// page holds the seeds' table and every source's table with their cells, a
// latency chart per source with a drawn curve and its p50/p99 marks, and
// nothing that a browser would fetch.
import { describe, expect, it } from 'vitest';
import type { CompareReport, SourceKind, SourceReport } from '../compare/compare.js';
import { renderHtml } from '../compare/html.js';
import { seedsTable } from '../compare/table.js';
import type { FaultScenario } from '../compare/trial.js';
import { verdictOf } from '../compare/verdict.js';

const fault = (trials: number, bad: number): FaultScenario => ({
  fault: `a fault <with markup> & more`,
  trials,
  injected: trials,
  firstHeld: trials,
  doubleGrants: bad,
  tokenRegressions: bad,
  staleAccepted: { postgres: bad, s3: bad, http: bad },
  errors: [],
});

function source(kind: SourceKind, bad: number, p50: number, samples: boolean): SourceReport {
  const acquireMs = Array.from({ length: 40 }, (_, i) => p50 * (0.6 + i / 20));
  const r = {
    failover: fault(4, bad),
    ...(kind === 'redlock' ? { clock: fault(4, 0) } : {}),
    paused: {
      fault: 'SIGSTOP past the grant',
      deployment: 'single node',
      grantMs: 2000,
      trials: 4,
      injected: 4,
      heldAfterResume: 0,
      tokenRegressions: 0,
      fencingOff: { postgres: 4, s3: 4, http: 4 },
      fencingOn: { postgres: 0, s3: 0, http: 0 },
      errors: [],
    },
  };
  return {
    source: kind,
    deployment: `${kind} deployment`,
    ...r,
    trialsAsked: 4,
    latency: { cycles: 40, p50Ms: p50, p99Ms: p50 * 2.5, cyclesPerSecond: 1000 / p50, cpuMsPerCycle: 0.1, loadAverage: 1.5, ...(samples ? { acquireMs } : {}) },
    verdict: verdictOf(r),
  };
}

const report: CompareReport = {
  trials: 4,
  machine: { cores: 2, loadBefore: '1.00 1.10 1.20', loadAfter: '2.00 2.10 2.20' },
  seconds: 42,
  // etcd without samples: a report from before they were kept still renders its p50/p99.
  sources: [source('redis', 4, 0.34, true), source('redlock', 4, 0.57, true), source('etcd', 0, 1.34, false), source('zookeeper', 0, 1.17, true)],
  notVerified: [],
  errors: 0,
  incomplete: [],
};

const cellsOf = (html: string, tag: 'td' | 'th'): string[] => [...html.matchAll(new RegExp(`<${tag}[^>]*>([^<]*)</${tag}>`, 'g'))].map((m) => m[1] as string);

describe('npm run compare --html', () => {
  it("holds the seeds' table, cell by cell, with a column per source", async () => {
    const html = await renderHtml(report);
    const seeds = seedsTable(report);
    const header = seeds[0] as string[];
    expect(header.slice(1)).toEqual(['single Redis', 'Redlock over 5', 'etcd (3-node cluster)', 'ZooKeeper (3-node ensemble)']);
    // The page's first table is the seeds' table: its header, then its rows in order.
    const first = html.slice(html.indexOf('<table>'), html.indexOf('</table>'));
    expect(cellsOf(first, 'th')).toEqual(header);
    expect(cellsOf(first, 'td')).toEqual(seeds.slice(1).flat().map((c) => c.replace(/&/g, '&amp;')));
    expect(cellsOf(first, 'td')).toContain('4/4');
    expect(cellsOf(first, 'td')).toContain('0.34 / 0.85');
    expect(cellsOf(first, 'td')).toContain('correctness lock and election');
  });

  it('has a section per source with its rows, its escaped fault text and a latency chart with its marks', async () => {
    const html = await renderHtml(report);
    for (const s of report.sources) expect(html).toContain(`<h2 id="${s.source}">`);
    expect(html).toContain('a fault &lt;with markup&gt; &amp; more');
    expect(html).not.toContain('<with markup>');
    // 1 overview + 4 sources
    expect(html.match(/<svg /g)).toHaveLength(5);
    // Curves: the overview's one per source with samples (3), each such source's own (3).
    expect(html.match(/class="mark-line role-mark/g)).toHaveLength(6);
    // The p50/p99 points and labels of every source, etcd's too (no samples).
    expect(html.match(/class="mark-symbol role-mark/g)?.length).toBeGreaterThanOrEqual(4);
    for (const label of ['p50 0.34 ms', 'p99 0.85 ms', 'p50 1.34 ms', 'p99 3.35 ms']) expect(html).toContain(label);
    expect(html).toContain('Redlock over 5: uncontended acquire');
  });

  it('is self-contained: no script, no stylesheet link, no external fetch, no id used twice', async () => {
    const html = await renderHtml(report);
    expect(html).not.toMatch(/<script|<link|<img|@import|src="|href="http/i);
    const ids = [...html.matchAll(/\bid="([^"]+)"/g)].map((m) => m[1]);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
