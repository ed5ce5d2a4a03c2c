// fencekeeper/etcd as built: it imports nothing but Node and the core (etcd3
// is its users' own client, typed structurally), so the entry loads where
// etcd3 is not installed, and the core never loads it. Run `npm run build` first.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const dist = fileURLToPath(new URL('../../dist/src/sources/etcd/', import.meta.url));

describe('fencekeeper/etcd as built', () => {
  it('imports no package: only node: modules, its own files and the core', () => {
    if (!existsSync(dist)) throw new Error('dist/ is missing: run `npm run build` first (`npm test` does it for you)');
    const statement = /^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]|\bimport\(\s*['"]([^'"]+)['"]\s*\)/gm;
    const specifiers = new Set<string>();
    for (const file of readdirSync(dist).filter((f) => f.endsWith('.js'))) {
      for (const match of readFileSync(join(dist, file), 'utf8').matchAll(statement)) specifiers.add((match[1] ?? match[2] ?? match[3])!);
    }
    expect(specifiers.size).toBeGreaterThan(3);
    expect([...specifiers].filter((s) => !s.startsWith('node:') && !s.startsWith('./') && s !== '../../index.js' && s !== '../../extend.js')).toEqual([]);
  });
});
