// The CLI is the package's top layer: it may load the core and any adapter,
// and nothing in the core or the adapters may import it (or, in the core's
// case, an adapter). The demo's code stays apart from the operator commands:
// only `fencekeeper demo` loads it, and only when it runs. Read from the
// source tree, so a wrong import fails here before it ships.
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return sources(path);
    return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

interface Edge {
  readonly from: string;
  readonly to: string;
  readonly dynamic: boolean;
}

/** Every relative import of `file` (static, re-export, or import()), as a path from the root. */
function imports(file: string): Edge[] {
  const text = readFileSync(join(ROOT, file), 'utf8');
  const edges: Edge[] = [];
  const pattern = /(?:\bfrom\s+|\bimport\s+|\bimport\s*\(\s*)'(\.{1,2}\/[^']+)'/g;
  for (const match of text.matchAll(pattern)) {
    const target = relative(ROOT, resolve(join(ROOT, dirname(file)), match[1] as string));
    edges.push({ from: file, to: target, dynamic: match[0].includes('(') });
  }
  return edges;
}

const all = [...sources('src'), ...sources('adapters')].flatMap(imports);
const inside = (path: string, dir: string): boolean => path === dir || path.startsWith(`${dir}/`);

describe('layers', () => {
  it('finds the imports it checks', () => {
    expect(all.some((e) => e.from === 'src/cli/commands/migrate.ts' && inside(e.to, 'adapters/postgres'))).toBe(true);
    expect(all.some((e) => e.from === 'src/cli/main.ts' && e.to === 'src/index.js' && !e.dynamic)).toBe(true);
  });

  it('nothing outside the CLI imports it, and the core imports no adapter', () => {
    const wrong = all.filter(
      (e) => (!inside(e.from, 'src/cli') && inside(e.to, 'src/cli')) || (inside(e.from, 'src') && !inside(e.from, 'src/cli') && inside(e.to, 'adapters')),
    );
    expect(wrong).toEqual([]);
  });

  it('the demo is loaded only by `fencekeeper demo`, and only when it runs', () => {
    const intoDemo = all.filter((e) => !inside(e.from, 'src/cli/demo') && inside(e.to, 'src/cli/demo'));
    expect(intoDemo).toEqual([{ from: 'src/cli/commands/demo.ts', to: 'src/cli/demo/index.js', dynamic: true }]);
  });

  it('the CLI loads adapters only on demand (their libraries are optional peers)', () => {
    const staticAdapters = all.filter((e) => inside(e.from, 'src/cli') && inside(e.to, 'adapters') && !e.dynamic);
    expect(staticAdapters).toEqual([]);
  });
});
