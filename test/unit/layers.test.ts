// The layering rules of the code map (docs/code-map.md, "How the code is laid out"),
// read from the source tree so that a wrong import fails here before it
// ships:
// - the core (the files directly in src/) imports no source, adapter, CLI or
//   test kit;
// - a token source (src/sources/<name>/) imports only the core and its own
//   folder (and its family's shared folder);
// - an adapter (adapters/<name>/) imports only the core's public faces
//   (src/index.ts, and src/extend.ts for the publishers), its own folder and
//   its family's shared folder, so never another adapter or a source (one
//   exception: a family's entry, see familyEntry below);
// - a shared folder (src/shared/<family>/) imports only the core and itself;
// - the ZooKeeper wire client imports nothing from its recipes;
// - the CLI imports only public faces (entry points) and its own files, and
//   nothing imports it;
// - no import cycles, type-only imports included (a cycle of types today is
//   a cycle of values after the next refactoring).
// test/integration/cli/layers.test.ts keeps the CLI's own rules (the demo
// apart, the adapters loaded on demand).
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/**
 * The internal shared folders, by family: code that a source and an adapter
 * of one system share (tables and transaction helpers, a client), with no
 * entry point of its own, importable by that family's folders only. The
 * Redis source and the Redis fences share `src/shared/redis/` (the client's
 * structural type, send() with its node timeout, scripts by EVALSHA); the
 * PostgreSQL source and adapter will share `src/shared/postgres/`, the HTTP
 * guards `src/shared/http/`.
 */
const SHARED: Record<string, { readonly folder: string; readonly members: readonly string[] }> = {
  redis: { folder: 'src/shared/redis', members: ['src/sources/redis', 'adapters/redis'] },
  http: { folder: 'src/shared/http', members: ['adapters/express', 'adapters/fetch', 'adapters/hono', 'adapters/fastify'] },
  postgres: { folder: 'src/shared/postgres', members: ['src/sources/postgres', 'adapters/postgres'] },
};

/**
 * The one place an adapter may import a source: where one system plays both
 * roles, the family has one entry (fencekeeper/redis: the Redis lock and the
 * Redis fences), and that entry is the enforcement folder's index, which
 * re-exports its own family's source index (its public face, nothing
 * internal). Only index.ts to index.ts, only within the family: no other file
 * of the adapter reaches the source, so the fences still cannot depend on the
 * lock's internals.
 */
const familyEntry = (e: Edge): boolean => {
  const family = /^adapters\/([^/]+)\/index\.ts$/.exec(e.from)?.[1];
  return family !== undefined && e.to === `src/sources/${family}/index.ts`;
};

/**
 * Imports that reach into another folder's internals on purpose, each with
 * its reason. fencekeeper/testing's expireSession speaks ZooKeeper's wire
 * protocol itself (a second connection that claims the session), so it uses
 * the client's framing and records.
 */
const ALLOWED: readonly { readonly from: string; readonly to: string }[] = [
  { from: 'src/testing/expire-session.ts', to: 'src/sources/zookeeper/' },
];

function files(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = `${dir}/${name}`;
    if (statSync(join(ROOT, path)).isDirectory()) return files(path);
    return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

interface Edge {
  readonly from: string;
  readonly to: string;
}

/** Every relative import of `file` (static, type-only, re-export, import() and import('...').Type), as a .ts path from the root. */
function imports(file: string): Edge[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const pattern = /(?:\bfrom\s+|\bimport\s+|\bimport\s*\(\s*)'(\.{1,2}\/[^']+)'/g;
  return [...text.matchAll(pattern)].map((match) => {
    const target = relative(ROOT, resolve(join(ROOT, dirname(file)), match[1] as string)).replace(/\.js$/, '.ts');
    return { from: file, to: target };
  });
}

const all = [...files('src'), ...files('adapters')];
const edges = all.flatMap(imports);
const inside = (path: string, dir: string): boolean => path.startsWith(`${dir}/`);
/** A file of the core: directly in src/, or in src/errors/ (the errors by domain, re-exported by src/errors.ts). */
const isCore = (path: string): boolean => (path.startsWith('src/') && !path.slice(4).includes('/')) || inside(path, 'src/errors');
/** The folder of a source or an adapter ('src/sources/etcd', 'adapters/s3'), else null. */
const unit = (path: string): string | null => /^(src\/sources\/[^/]+|adapters\/[^/]+)\//.exec(path)?.[1] ?? null;
const sharedOf = (folder: string): string[] => Object.values(SHARED).filter((s) => s.members.includes(folder)).map((s) => s.folder);
const allowed = (e: Edge): boolean => ALLOWED.some((a) => e.from === a.from && e.to.startsWith(a.to));
/** The core's public faces: 'fencekeeper' and 'fencekeeper/extend'. */
const CORE_FACES = ['src/index.ts', 'src/extend.ts'];
const isEntry = (path: string): boolean => CORE_FACES.includes(path) || /^(src\/sources\/[^/]+|adapters\/[^/]+|src\/testing)\/index\.ts$/.test(path);

describe('layers', () => {
  it('finds the imports it checks', () => {
    expect(edges.some((e) => e.from === 'src/sources/etcd/lock.ts' && e.to === 'src/index.ts')).toBe(true);
    expect(edges.some((e) => e.from === 'src/sources/zookeeper/recipes/lock.ts' && isCore(e.to))).toBe(true);
    expect(edges.some((e) => e.from === 'adapters/postgres/rows/fenced-rows.ts' && e.to === 'src/index.ts')).toBe(true);
    expect(edges.some((e) => inside(e.from, 'src/cli') && e.to === 'src/sources/zookeeper/index.ts')).toBe(true);
    // every target exists: a path this test resolves wrongly would pass every rule below
    expect(edges.filter((e) => !all.includes(e.to))).toEqual([]);
  });

  it('the core imports no source, adapter, CLI or test kit', () => {
    expect(edges.filter((e) => isCore(e.from) && !isCore(e.to))).toEqual([]);
  });

  it('the errors import nothing but each other: they are the bottom of the core, imported by everything', () => {
    expect(edges.filter((e) => (inside(e.from, 'src/errors') || e.from === 'src/errors.ts') && !inside(e.to, 'src/errors'))).toEqual([]);
    expect(edges.some((e) => e.from === 'src/errors/locks.ts' && e.to === 'src/errors/base.ts')).toBe(true);
  });

  it('a source imports only the core, its own folder and its family\'s shared folder', () => {
    const wrong = edges.filter((e) => {
      const from = unit(e.from);
      if (from === null || !from.startsWith('src/sources/')) return false;
      return !isCore(e.to) && !inside(e.to, from) && !sharedOf(from).some((s) => inside(e.to, s)) && !allowed(e);
    });
    expect(wrong).toEqual([]);
  });

  it('the ZooKeeper wire client imports nothing from the recipes built on it', () => {
    const wire = edges.filter((e) => inside(e.from, 'src/sources/zookeeper') && !inside(e.from, 'src/sources/zookeeper/recipes') && e.from !== 'src/sources/zookeeper/index.ts');
    expect(wire.filter((e) => inside(e.to, 'src/sources/zookeeper/recipes'))).toEqual([]);
  });

  it('an adapter imports only the core\'s public faces, its own folder and its family\'s shared folder (never another adapter or a source, but for its family\'s entry)', () => {
    const wrong = edges.filter((e) => {
      const from = unit(e.from);
      if (from === null || !from.startsWith('adapters/')) return false;
      return !CORE_FACES.includes(e.to) && !inside(e.to, from) && !sharedOf(from).some((s) => inside(e.to, s)) && !allowed(e) && !familyEntry(e);
    });
    expect(wrong).toEqual([]);
  });

  it('the family-entry exception is as narrow as it says: only an adapter\'s index.ts, only its own family\'s source index', () => {
    expect(familyEntry({ from: 'adapters/redis/index.ts', to: 'src/sources/redis/index.ts' })).toBe(true);
    expect(familyEntry({ from: 'adapters/redis/keys.ts', to: 'src/sources/redis/index.ts' })).toBe(false);
    expect(familyEntry({ from: 'adapters/redis/index.ts', to: 'src/sources/redis/scripts.ts' })).toBe(false);
    expect(familyEntry({ from: 'adapters/redis/index.ts', to: 'src/sources/etcd/index.ts' })).toBe(false);
    expect(edges.some(familyEntry)).toBe(true);
  });

  it('a shared folder imports only the core and itself', () => {
    const wrong = edges.filter((e) => Object.values(SHARED).some((s) => inside(e.from, s.folder) && !isCore(e.to) && !inside(e.to, s.folder)));
    expect(wrong).toEqual([]);
  });

  it('a shared folder is imported only by its family', () => {
    const wrong = edges.filter((e) =>
      Object.values(SHARED).some((s) => inside(e.to, s.folder) && !inside(e.from, s.folder) && !s.members.some((m) => inside(e.from, m))),
    );
    expect(wrong).toEqual([]);
  });

  it('the CLI imports only public faces and its own files, and nothing imports it', () => {
    const fromCli = edges.filter((e) => inside(e.from, 'src/cli') && !inside(e.to, 'src/cli') && !isEntry(e.to));
    expect(fromCli).toEqual([]);
    const intoCli = edges.filter((e) => !inside(e.from, 'src/cli') && inside(e.to, 'src/cli'));
    expect(intoCli).toEqual([]);
  });

  it('the test kit imports the core and public faces (and what ALLOWED names)', () => {
    const wrong = edges.filter((e) => inside(e.from, 'src/testing') && !inside(e.to, 'src/testing') && !isCore(e.to) && !isEntry(e.to) && !allowed(e));
    expect(wrong).toEqual([]);
  });

  it('no import cycles', () => {
    const next = new Map<string, string[]>();
    for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
    const cycles: string[] = [];
    const state = new Map<string, 'open' | 'done'>();
    const stack: string[] = [];
    const visit = (file: string): void => {
      state.set(file, 'open');
      stack.push(file);
      for (const to of next.get(file) ?? []) {
        if (state.get(to) === 'open') cycles.push([...stack.slice(stack.indexOf(to)), to].join(' -> '));
        else if (!state.has(to)) visit(to);
      }
      stack.pop();
      state.set(file, 'done');
    };
    for (const file of all) if (!state.has(file)) visit(file);
    expect(cycles).toEqual([]);
  });
});
