// What a held ZooKeeper lock and a waiting acquire keep on the client's heap, by
// constructor: three heap snapshots (v8.writeHeapSnapshot) of one process - before,
// with L locks held by one session, with one waiting acquire per lock from a second
// session - and per (node type, constructor or closure name) the count and the self
// size added, over L. Self sizes add up to the heapUsed delta the scale bench
// prints (./heap.ts), so this says where its figure sits: the wire client
// (src/sources/zookeeper/*.ts) or the recipes.
//   node --expose-gc node_modules/vite-node/vite-node.mjs test/bench/scale/zk-heap-profile.ts
// (or transpiled with esbuild into dist/test/bench/scale/ after npm run build, under plain
// node: a smaller heap, so shorter snapshot pauses)
// Env: FK_ZK_STANDALONE (default 127.0.0.1:2181), PROFILE_LOCKS (default 5000). Asserts nothing.
import { readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { writeHeapSnapshot } from 'node:v8';
import { ZooKeeperClient } from '../../../src/sources/zookeeper/client.js';
import { zookeeperSource } from '../../../src/sources/zookeeper/recipes/source.js';
import type { Lock } from '../../../src/lock.js';

const SERVER = process.env['FK_ZK_STANDALONE'] ?? '127.0.0.1:2181';
const L = Number(process.env['PROFILE_LOCKS'] ?? 5000);
declare const gc: () => void;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function snapshot(label: string): string {
  gc();
  gc();
  return writeHeapSnapshot(`${tmpdir()}/fk-zk-heap-${process.pid}-${label}.heapsnapshot`);
}

interface Group {
  count: number;
  bytes: number;
}

/** Count and self size per "type:name" of a heap snapshot file. */
function groups(file: string): Map<string, Group> {
  const snap = JSON.parse(readFileSync(file, 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snap.snapshot.meta.node_fields;
  const width = fields.length;
  const iType = fields.indexOf('type');
  const iName = fields.indexOf('name');
  const iSize = fields.indexOf('self_size');
  const types = snap.snapshot.meta.node_types[0];
  const out = new Map<string, Group>();
  for (let i = 0; i < snap.nodes.length; i += width) {
    const type = types[snap.nodes[i + iType]!]!;
    let name = snap.strings[snap.nodes[i + iName]!]!;
    // Strings and numbers by type only (their "name" is their content).
    if (type === 'string' || type === 'concatenated string' || type === 'sliced string' || type === 'number' || type === 'bigint') name = '';
    if (type === 'code' || type === 'hidden' || type === 'array') name = name.length > 40 ? name.slice(0, 40) : name;
    const key = `${type}:${name}`;
    const g = out.get(key) ?? { count: 0, bytes: 0 };
    g.count++;
    g.bytes += snap.nodes[i + iSize]!;
    out.set(key, g);
  }
  return out;
}

/** For the nodes new in `after` (ids absent from `before`): self size per "retainer -edge-> node", over L. */
function retainers(before: string, after: string, title: string): void {
  type Snap = { snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } }; nodes: number[]; edges: number[]; strings: string[] };
  const ids = (f: string): Set<number> => {
    const sn = JSON.parse(readFileSync(f, 'utf8')) as Snap;
    const w = sn.snapshot.meta.node_fields.length;
    const iId = sn.snapshot.meta.node_fields.indexOf('id');
    const out = new Set<number>();
    for (let i = 0; i < sn.nodes.length; i += w) out.add(sn.nodes[i + iId]!);
    return out;
  };
  const old = ids(before);
  const sn = JSON.parse(readFileSync(after, 'utf8')) as Snap;
  const nf = sn.snapshot.meta.node_fields;
  const w = nf.length;
  const [iType, iName, iId, iSize, iEdges] = ['type', 'name', 'id', 'self_size', 'edge_count'].map((x) => nf.indexOf(x)) as [number, number, number, number, number];
  const ef = sn.snapshot.meta.edge_fields;
  const ew = ef.length;
  const [eType, eName, eTo] = ['type', 'name_or_index', 'to_node'].map((x) => ef.indexOf(x)) as [number, number, number];
  const types = sn.snapshot.meta.node_types[0];
  const etypes = sn.snapshot.meta.edge_types[0];
  const label = (n: number): string => {
    const t = types[sn.nodes[n + iType]!]!;
    const name = t === 'string' || t === 'number' || t === 'concatenated string' || t === 'sliced string' ? '' : sn.strings[sn.nodes[n + iName]!]!.slice(0, 40);
    return `${t}:${name}`;
  };
  const counted = new Set<number>();
  const groups = new Map<string, number>();
  let e = 0;
  for (let n = 0; n < sn.nodes.length; n += w) {
    const count = sn.nodes[n + iEdges]!;
    for (let k = 0; k < count; k++, e += ew) {
      const to = sn.edges[e + eTo]!;
      const et = etypes[sn.edges[e + eType]!]!;
      if (et === 'weak' || counted.has(to) || old.has(sn.nodes[to + iId]!)) continue;
      counted.add(to);
      const edge = et === 'element' || et === 'hidden' ? `[${et}]` : String(sn.strings[sn.edges[e + eName]!] ?? sn.edges[e + eName]);
      const key = `${label(n)} -${edge}-> ${label(to)}`;
      groups.set(key, (groups.get(key) ?? 0) + sn.nodes[to + iSize]!);
    }
  }
  console.log(`\n${title}: new objects by their first retainer (bytes/lock, the largest):`);
  for (const [k, b] of [...groups].sort((x, y) => y[1] - x[1]).slice(0, 30)) console.log(`${(b / L).toFixed(1).padStart(10)}  ${k}`);
}

function report(title: string, a: Map<string, Group>, b: Map<string, Group>): void {
  const rows = [...new Set([...a.keys(), ...b.keys()])].map((k) => {
    const x = a.get(k) ?? { count: 0, bytes: 0 };
    const y = b.get(k) ?? { count: 0, bytes: 0 };
    return { k, count: (y.count - x.count) / L, bytes: (y.bytes - x.bytes) / L };
  });
  const total = rows.reduce((s, r) => s + r.bytes, 0);
  console.log(`\n${title}: ${total.toFixed(0)} bytes per lock (self sizes added over ${L}); the largest:`);
  console.log('bytes/lock  objects/lock  type:constructor');
  for (const r of rows.sort((p, q) => q.bytes - p.bytes).slice(0, 22)) console.log(`${r.bytes.toFixed(1).padStart(10)}  ${r.count.toFixed(2).padStart(12)}  ${r.k}`);
}

// A heap snapshot stops the process for seconds on a loaded machine; a session may expire
// meanwhile. The figures are taken by then: its rejections are not what this measures.
process.on('unhandledRejection', (e) => console.error(`after the snapshots: ${String(e)}`));
process.on('uncaughtException', (e) => console.error(`after the snapshots: ${String(e)}`));
const holderZk = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 40_000 });
const waiterZk = await ZooKeeperClient.connect({ connectString: SERVER, sessionTimeoutMs: 40_000 });
const holder = zookeeperSource(holderZk);
const waiter = zookeeperSource(waiterZk);
const tag = `scale/profile/${Date.now().toString(36)}`;
const names = Array.from({ length: L }, (_, i) => `${tag}/${i}`);
const files: string[] = [];
try {
  await (await holder.acquireLock(`${tag}/warm`)).release();
  await (await waiter.acquireLock(`${tag}/warm`)).release();
  await sleep(200);
  files.push(snapshot('0'));
  const held: Lock[] = [];
  for (let i = 0; i < L; i += 500) held.push(...(await Promise.all(names.slice(i, i + 500).map((n) => holder.acquireLock(n)))));
  await sleep(300);
  files.push(snapshot('1'));
  const waiting: Promise<Lock>[] = [];
  for (let i = 0; i < L; i += 500) {
    waiting.push(...names.slice(i, i + 500).map((n) => waiter.acquireLock(n)));
    for (const w of waiting.slice(i)) w.catch(() => undefined);
    await waiterZk.sync('/');
  }
  await sleep(1500);
  files.push(snapshot('2'));
  const [s0, s1, s2] = files.map(groups) as [Map<string, Group>, Map<string, Group>, Map<string, Group>];
  report(`held locks (one session, ${L} locks)`, s0, s1);
  report(`waiting acquires (a second session, one per lock)`, s1, s2);
  retainers(files[0]!, files[1]!, 'held locks');
  retainers(files[1]!, files[2]!, 'waiting acquires');
  for (let i = 0; i < L; i += 500) await Promise.all(held.slice(i, i + 500).map((l) => l.release()));
  const granted = await Promise.all(waiting);
  for (let i = 0; i < L; i += 500) await Promise.all(granted.slice(i, i + 500).map((l) => l.release()));
} finally {
  for (const f of files) rmSync(f, { force: true });
  await holderZk.close();
  await waiterZk.close();
}
