// The wait-for graph behind FENCE_DEADLOCK, on its own: a cycle longer than
// two requests, and no cycle where a holder is not itself waiting, has
// released, or holds the same name in another store.
import { describe, expect, it } from 'vitest';
import { MemoryFenceStore } from '../../adapters/express/index.js';
import { WaitForGraph } from '../../src/shared/http/wait-for.js';

const store = new MemoryFenceStore();
const other = new MemoryFenceStore();
const key = (resource: string, s = store) => ({ store: s, resource });

describe('WaitForGraph', () => {
  it('finds a cycle of three (r1 holds A wants B, r2 holds B wants C, r3 holds C wants A) when its last edge is asked for', () => {
    const graph = new WaitForGraph();
    const [r1, r2, r3] = [{}, {}, {}];
    expect(graph.wait(r1, [key('A')], key('B'))).toBeUndefined();
    expect(graph.wait(r2, [key('B')], key('C'))).toBeUndefined();
    expect(graph.wait(r3, [key('C')], key('A'))).toEqual(['A', 'B', 'C']);
    // The refused wait is not recorded: r1 asking again still sees r3 as not waiting.
    graph.stopWaiting(r1);
    expect(graph.wait(r1, [key('A')], key('B'))).toBeUndefined();
  });

  it('no cycle through a holder that waits for nothing, that stopped waiting, or that released', () => {
    const graph = new WaitForGraph();
    const [r1, r2] = [{}, {}];
    graph.wait(r1, [key('A')], key('B'));
    graph.stopWaiting(r1); // r1 was admitted to B
    expect(graph.wait(r2, [key('B')], key('A'))).toBeUndefined();
    graph.stopWaiting(r2);

    const graph2 = new WaitForGraph();
    graph2.wait(r1, [key('A')], key('B'));
    graph2.release(r1, key('A')); // r1's admission for A settled (its client left)
    expect(graph2.wait(r2, [key('B')], key('A'))).toBeUndefined();
  });

  it('the same resource name in another store is another fence', () => {
    const graph = new WaitForGraph();
    const [r1, r2] = [{}, {}];
    graph.wait(r1, [key('A')], key('B'));
    expect(graph.wait(r2, [key('B', other)], key('A'))).toBeUndefined();
    expect(graph.wait(r2, [key('B')], key('A'))).toEqual(['A', 'B']);
  });
});
