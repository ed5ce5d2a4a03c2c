// The demo's timeline picture (src/cli/demo/timeline.ts), from a fixed list
// of events shaped as a real run records them (times from one run of
// `npm run demo`): the lanes, the pause band, the grant's end, a mark per
// write with its outcome, the marks in time order on the axis, and the quiet
// stretches drawn as labelled breaks. test/integration/cli/demo.test.ts checks
// the picture a real run writes.
import { describe, expect, it } from 'vitest';
import { timelineSvg, type TimelineEvent } from '../../src/cli/demo/timeline.js';

const T0 = 1_765_000_000_000;
const writes = (actor: string, at: number, outcome: string): TimelineEvent[] =>
  ['postgres', 's3', 'http'].map((resource, i) => ({ kind: 'write', actor, at: T0 + at + i * 110, resource, outcome }));

function run(stale: 'refused' | 'accepted'): TimelineEvent[] {
  return [
    { kind: 'acquire', actor: 'A', at: T0, token: '429' },
    ...writes('A', 100, 'accepted'),
    { kind: 'pause', actor: 'A', at: T0 + 490 },
    { kind: 'expire', actor: 'zookeeper', at: T0 + 4300, what: "A's session times out: its lock node is deleted" },
    { kind: 'acquire', actor: 'B', at: T0 + 6620, token: '439' },
    ...writes('B', 6710, 'accepted'),
    { kind: 'release', actor: 'B', at: T0 + 7000 },
    { kind: 'resume', actor: 'A', at: T0 + 7010 },
    ...writes('A', 7130, stale),
    { kind: 'end', actor: 'A', at: T0 + 7460 },
  ];
}

const info = { subtitle: 'ZooKeeper at 127.0.0.1:2181, session timeout 4000 ms', unfenced: false };

/** The x of every mark of a class, in document order (writes are drawn in event order). */
const xs = (svg: string, cls: string): number[] => [...svg.matchAll(new RegExp(`<g class="write ${cls}"><circle cx="([0-9.]+)"`, 'g'))].map((m) => Number(m[1]));
const attr = (svg: string, cls: string, name: string): number => Number(new RegExp(`class="${cls}"[^>]* ${name}="([0-9.]+)"`).exec(svg)?.[1]);

describe('the demo timeline picture', () => {
  it('draws the lanes, the pause, the grant ending and every write with its outcome', () => {
    const svg = timelineSvg(run('refused'), info);
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    for (const text of ['holder A', 'holder B', 'lock service', 'zookeeper', 'holds the lock (token 429)', 'A frozen (SIGSTOP) 6.5 s', "A's session times out", 'at 4.30 s: the lock is free', 'all 3 refused', 'all 3 accepted', info.subtitle]) {
      expect(svg).toContain(text);
    }
    // 3 accepted writes of A before the pause and 3 of B; A's 3 stale ones refused (the legend adds one of each).
    expect(xs(svg, 'accepted')).toHaveLength(6 + 1);
    expect(xs(svg, 'refused')).toHaveLength(3 + 1);
    // Accepted: a white tick on green; refused: a white cross on red.
    const marks = [...svg.matchAll(/<g class="write (\w+)"><circle [^>]* fill="(#[0-9a-f]+)"\/><path d="([^"]+)"/g)].map((m) => [m[1], m[2], /l2\.6 2\.8/.test(m[3] as string) ? 'tick' : 'cross']);
    expect(new Set(marks.map((m) => m.join(' ')))).toEqual(new Set(['accepted #2e7d32 tick', 'refused #c62828 cross']));
    expect(svg.match(/class="grant"/g)).toHaveLength(2);
    expect(svg.match(/class="lost"/g)).toHaveLength(1);
    expect(svg.match(/class="expire"/g)).toHaveLength(1);
    expect(svg).not.toContain('fencing OFF');
  });

  it('places the marks in time order: B writes after the grant ended, A after B', () => {
    const svg = timelineSvg(run('refused'), info);
    const accepted = xs(svg, 'accepted').slice(0, 6);
    const refused = xs(svg, 'refused').slice(0, 3);
    const expire = attr(svg, 'expire', 'x1');
    const [a1, a2, a3, b1, b2, b3] = accepted as [number, number, number, number, number, number];
    expect(a1).toBeLessThan(a2);
    expect(a3).toBeLessThan(expire);
    expect(expire).toBeLessThan(b1);
    expect(b1).toBeLessThan(b2);
    expect(b3).toBeLessThan(Math.min(...refused));
    // Nothing drawn past the plot: every mark inside the picture's width.
    const width = Number(/<svg [^>]*width="(\d+)"/.exec(svg)?.[1]);
    for (const x of [...accepted, ...refused]) expect(x).toBeLessThan(width - 150);
  });

  it('squeezes the quiet stretches into labelled breaks, 50 ms apart still apart', () => {
    const svg = timelineSvg(run('refused'), info);
    // Two quiet stretches: the pause before the expiry, and the wait for B's process.
    expect(svg.match(/font-size="11" text-anchor="middle" fill="#666">\+[0-9.]+ s</g)).toHaveLength(2);
    expect(svg).toContain('+3.4 s');
    expect(svg).toContain('+1.9 s');
    const [b1, b2] = xs(svg, 'accepted').slice(3, 5) as [number, number];
    expect(b2 - b1).toBeGreaterThan(20);
  });

  it('shows the stale writes landing when fencing is off', () => {
    const svg = timelineSvg(run('accepted'), { ...info, unfenced: true });
    expect(svg).toContain('fencing OFF');
    expect(xs(svg, 'refused')).toHaveLength(1); // the legend's only
    expect(svg).toContain('all 3 accepted');
    expect(svg).toContain("B's data overwritten");
  });
});
