// The arrival rule of lock-delay (src/sources/zookeeper/recipes/lock-delay.ts) on
// hand-made parent stats: the cases a real server only produces in a race
// between two pipelined requests (a child that came and went between the
// read before our create and the read after it), next to the ordinary ones.
import { describe, expect, it } from 'vitest';
import { arrivedClean } from '../../src/sources/zookeeper/recipes/lock-delay.js';
import type { Stat } from '../../src/sources/zookeeper/protocol.js';

const OURS = 'aaaa-lock-0000000007';

function stat(fields: Partial<Stat>): Stat {
  return { czxid: 100n, mzxid: 100n, ctime: 0, mtime: 0, version: 0, cversion: 0, aversion: 0, ephemeralOwner: 0n, dataLength: 0, numChildren: 0, pzxid: 100n, ...fields };
}

/** The parent just after a clean release: mzxid = pzxid, later than its creation. */
const cleanBefore = stat({ mzxid: 150n, pzxid: 150n, version: 3, cversion: 14, numChildren: 0 });

describe('arrivedClean', () => {
  it('clean: the last child change before our create was a clean release, and only our create came between', () => {
    expect(arrivedClean(cleanBefore, { children: [OURS], stat: stat({ mzxid: 150n, pzxid: 160n, cversion: 15, numChildren: 1 }) }, OURS)).toBe(true);
  });

  it('clean: nodes that joined behind ours before the second read change nothing', () => {
    const after = { children: [OURS, 'bbbb-lock-0000000008', 'cccc-lock-0000000009'], stat: stat({ mzxid: 150n, pzxid: 170n, cversion: 17, numChildren: 3 }) };
    expect(arrivedClean(cleanBefore, after, OURS)).toBe(true);
  });

  it('clean: a foreign child present in both reads changes nothing', () => {
    const before = stat({ mzxid: 150n, pzxid: 150n, version: 3, cversion: 14, numChildren: 1 });
    expect(arrivedClean(before, { children: ['keeper', OURS], stat: stat({ mzxid: 150n, pzxid: 160n, cversion: 15, numChildren: 2 }) }, OURS)).toBe(true);
  });

  it('unclean: a node joined and left (a holder that expired) between the two reads', () => {
    // cversion counts its create and its delete and our create; the children count only ours.
    expect(arrivedClean(cleanBefore, { children: [OURS], stat: stat({ mzxid: 150n, pzxid: 160n, cversion: 17, numChildren: 1 }) }, OURS)).toBe(false);
  });

  it('unclean: a server that did not count deletes in cversion, the same departure', () => {
    expect(arrivedClean(cleanBefore, { children: [OURS], stat: stat({ mzxid: 150n, pzxid: 160n, cversion: 16, numChildren: 1 }) }, OURS)).toBe(false);
  });

  it('unclean: the last child change before our create was not a clean release (an expiry, a plain delete)', () => {
    const before = stat({ mzxid: 150n, pzxid: 155n, version: 3, cversion: 15, numChildren: 0 });
    expect(arrivedClean(before, { children: [OURS], stat: stat({ mzxid: 150n, pzxid: 160n, cversion: 16, numChildren: 1 }) }, OURS)).toBe(false);
  });

  it('unclean: a fresh parent (mzxid = pzxid = czxid) says nothing about a reaped one before it', () => {
    const before = stat({ czxid: 150n, mzxid: 150n, pzxid: 150n });
    expect(arrivedClean(before, { children: [OURS], stat: stat({ czxid: 150n, mzxid: 150n, pzxid: 160n, cversion: 1, numChildren: 1 }) }, OURS)).toBe(false);
  });

  it('unclean: no parent before our create, another parent after it, or a second read without our node', () => {
    const after = { children: [OURS], stat: stat({ mzxid: 150n, pzxid: 160n, cversion: 15, numChildren: 1 }) };
    expect(arrivedClean(null, after, OURS)).toBe(false);
    expect(arrivedClean(cleanBefore, null, OURS)).toBe(false);
    expect(arrivedClean(cleanBefore, { ...after, stat: { ...after.stat, czxid: 140n } }, OURS)).toBe(false);
    expect(arrivedClean(cleanBefore, { children: [], stat: stat({ mzxid: 150n, pzxid: 150n, cversion: 14, numChildren: 0 }) }, OURS)).toBe(false);
  });
});
