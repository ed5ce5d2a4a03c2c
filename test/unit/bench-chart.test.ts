import { describe, expect, it } from 'vitest';
import { barChartSpec, lineChartSpec, renderSvg } from '../bench/lib/chart.js';

// The charts a bench writes must render in Node without a browser or canvas, and carry
// the numbers they were given (a chart with no marks would pass a size check).
describe('bench charts', () => {
  it('renders a log-x line chart with one line per series', async () => {
    const svg = await renderSvg(
      lineChartSpec(
        [
          { series: 'zookeeper', x: 1, y: 2.5 },
          { series: 'zookeeper', x: 1000, y: 3.1 },
          { series: 'etcd', x: 1, y: 4 },
          { series: 'etcd', x: 1000, y: 4.4 },
        ],
        { title: 'handoff p50', subtitle: 'npm run bench', xTitle: 'waiters', yTitle: 'ms', xLog: true },
      ),
    );
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('handoff p50');
    expect(svg).toContain('zookeeper');
    expect(svg).toContain('etcd');
    // one line group per series, and a symbol per point
    expect(svg.match(/class="mark-line role-mark/g)?.length).toBe(2);
    expect(svg).toContain('mark-symbol role-mark');
  });

  it('renders grouped bars with an aim rule', async () => {
    const svg = await renderSvg(
      barChartSpec(
        [
          { group: '0.5 ms', series: 'withFence', value: 0.96 },
          { group: '0.5 ms', series: 'plain', value: 1 },
        ],
        { title: 'ratio', yTitle: 'x of plain', rule: { value: 0.95, label: 'aim' } },
      ),
    );
    expect(svg).toContain('withFence');
    expect(svg).toContain('mark-rule');
    expect(svg).toContain('mark-rect');
  });

  it('draws the series in the order given, legend included, with no label cut short', async () => {
    const points = ['zeta, a long series name that a legend would cut', 'alpha', 'mu'].map((series, i) => ({ group: 'g', series, value: i + 1 }));
    const ordered = await renderSvg(barChartSpec(points, { title: 't', yTitle: 'y', seriesOrder: ['zeta, a long series name that a legend would cut', 'alpha', 'mu'] }));
    const legend = (svg: string): string[] => [...svg.matchAll(/<text[^>]*>(zeta[^<]*|alpha|mu)<\/text>/g)].map((m) => m[1]!);
    expect(legend(ordered)).toEqual(['zeta, a long series name that a legend would cut', 'alpha', 'mu']);
    // Without an order: by name.
    const byName = await renderSvg(barChartSpec(points, { title: 't', yTitle: 'y' }));
    expect(legend(byName)[0]).toBe('alpha');
  });
});
