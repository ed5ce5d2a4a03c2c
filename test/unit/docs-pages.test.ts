// The documentation as a set of pages that ship in the package: every
// relative link of README.md and docs/*.md lands on a file the package ships
// (package.json "files") and, for an #anchor, on a heading of that page;
// every guide in docs/ can be reached from the README; and docs/errors.md
// lists exactly the error codes of src/errors/base.ts, so a new code without a row
// (or a row for a code that is gone) fails here.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { brokenLinks, isExternal, markdownLinks, pendingGuide } from '../helpers/doc-links.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { files: string[]; exports: Record<string, unknown> };

/** The files below `path` (from the root), or `path` itself. */
function walk(path: string): string[] {
  if (!existsSync(`${ROOT}${path}`)) return [];
  if (!statSync(`${ROOT}${path}`).isDirectory()) return [path];
  return readdirSync(`${ROOT}${path}`).flatMap((entry) => walk(`${path}/${entry}`));
}

/** What npm pack ships: package.json and the "files" entries (dist/ as far as it is built). */
const shipped = new Set(['package.json', ...pkg.files.flatMap((entry) => walk(entry.replace(/\/$/, '')))]);
const pages = ['README.md', ...readdirSync(`${ROOT}docs`).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];
const read = (path: string): string => readFileSync(`${ROOT}${path}`, 'utf8');

const pending = pendingGuide(pkg.exports);

/** The string literals of `export type <name> = ...;` in src/errors/base.ts. */
function codesOf(source: string, name: string): string[] {
  const at = source.indexOf(`export type ${name} =`);
  if (at < 0) throw new Error(`src/errors/base.ts has no type ${name}`);
  const body = source.slice(at, source.indexOf(';', at)).replace(/\/\/.*$/gm, '');
  return [...body.matchAll(/'([A-Z0-9_]+)'/g)].map((m) => m[1] as string);
}

/** The codes in the first cells of the table under "## Error codes" in docs/errors.md. */
function documentedCodes(page: string): string[] {
  const at = page.indexOf('\n## Error codes\n');
  if (at < 0) throw new Error('docs/errors.md has no "## Error codes" section');
  const end = page.indexOf('\n## ', at + 1);
  const section = page.slice(at, end < 0 ? undefined : end);
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .flatMap((line) => [...(line.split(' | ')[0] as string).matchAll(/`([A-Z0-9_]+)`/g)].map((m) => m[1] as string));
}

describe('the documentation pages', () => {
  it('docs/errors.md lists every error code of src/errors/base.ts, once, and no other', () => {
    const source = read('src/errors/base.ts');
    const codes = [...codesOf(source, 'ErrorCode'), ...codesOf(source, 'ZooKeeperErrorCode')];
    expect(codes.length).toBeGreaterThan(40);
    const documented = documentedCodes(read('docs/errors.md'));
    expect(documented.filter((code, i) => documented.indexOf(code) !== i), 'listed twice').toEqual([]);
    expect([...documented].sort()).toEqual([...codes].sort());
  });

  it('ship in the package', () => {
    expect(pages.filter((page) => !shipped.has(page))).toEqual([]);
  });

  it('link only to files the package ships, and to headings those pages have', () => {
    expect(pages.flatMap((page) => brokenLinks(page, read(page), shipped, read, pending))).toEqual([]);
  });

  it('every page of docs/ can be reached from the README', () => {
    const reached = new Set(['README.md']);
    const queue = ['README.md'];
    while (queue.length > 0) {
      const page = queue.shift() as string;
      for (const { target } of markdownLinks(read(page))) {
        if (isExternal(target)) continue;
        const path = target.split('#')[0] as string;
        if (path === '' || !path.endsWith('.md')) continue;
        const file = new URL(path, `file:///${page}`).pathname.slice(1);
        if (!reached.has(file) && existsSync(`${ROOT}${file}`)) {
          reached.add(file);
          queue.push(file);
        }
      }
    }
    expect(pages.filter((page) => !reached.has(page))).toEqual([]);
  });
});
