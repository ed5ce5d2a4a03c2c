// docs/code-map.md ("How the code is laid out") against the tree: every
// path it names exists, and every folder of src/, src/sources/ and adapters/ (and every
// file directly in src/ and its folders' top level) is named, so a new
// maintainer's map cannot drift from the code.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The paths the section's text block names, each with its parents (by indentation). */
function namedPaths(): Set<string> {
  const readme = readFileSync(`${ROOT}docs/code-map.md`, 'utf8');
  const at = readme.indexOf('# How the code is laid out');
  if (at < 0) throw new Error('docs/code-map.md has no "How the code is laid out" title');
  const open = readme.indexOf('```text\n', at);
  const close = readme.indexOf('\n```', open + 8);
  if (open < 0 || close < 0) throw new Error('the layout section has no ```text block');
  const paths = new Set<string>();
  const stack: { indent: number; path: string }[] = [];
  for (const line of readme.slice(open + 8, close).split('\n')) {
    const match = /^( *)(\S+)/.exec(line);
    if (match === null) continue;
    const indent = (match[1] as string).length;
    const name = match[2] as string;
    // a continuation of the description above, not a path
    if (!name.endsWith('/') && !/\.\w+$/.test(name)) continue;
    while (stack.length > 0 && (stack.at(-1) as { indent: number }).indent >= indent) stack.pop();
    const parent = stack.at(-1)?.path ?? '';
    const path = parent + name;
    paths.add(path.replace(/\/$/, ''));
    if (name.endsWith('/')) stack.push({ indent, path });
  }
  return paths;
}

/** Folders below `dir` (relative to the root), and the files directly in `dir` and in its `depth` levels of folders. */
function tree(dir: string, depth: number): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(`${ROOT}${dir}`)) {
    const path = `${dir}/${entry}`;
    if (statSync(`${ROOT}${path}`).isDirectory()) {
      out.push(path);
      if (depth > 0) out.push(...tree(path, depth - 1));
    } else if (entry.endsWith('.ts') && depth >= 0) {
      out.push(path);
    }
  }
  return out;
}

describe('README: how the code is laid out', () => {
  const named = namedPaths();

  it('names only paths that exist', () => {
    const missing = [...named].filter((path) => {
      try {
        statSync(`${ROOT}${path}`);
        return false;
      } catch {
        return true;
      }
    });
    expect(missing).toEqual([]);
  });

  it('test/helpers holds helpers only: their tests are under test/integration/harness/', () => {
    expect(readdirSync(`${ROOT}test/helpers`).filter((e) => /\.test(-d)?\.ts$/.test(e))).toEqual([]);
  });

  it('names every folder of src/ and adapters/, and the files of src/, src/sources/zookeeper/ and its recipes, src/testing/ and src/cli/', () => {
    const wanted = [
      ...readdirSync(`${ROOT}src`).map((e) => `src/${e}`),
      ...readdirSync(`${ROOT}src/sources`).map((e) => `src/sources/${e}`),
      ...tree('src/sources/zookeeper', 1),
      ...tree('src/testing', 0),
      ...tree('src/cli', 0).filter((p) => !/\/(commands|services|demo)\//.test(p)),
      ...readdirSync(`${ROOT}adapters`).map((e) => `adapters/${e}`),
      ...tree('adapters/postgres', 0).filter((p) => !p.endsWith('.md')),
      ...tree('adapters/express', 0),
      ...readdirSync(`${ROOT}test`).filter((e) => statSync(`${ROOT}test/${e}`).isDirectory()).map((e) => `test/${e}`),
      ...readdirSync(`${ROOT}test/integration`).filter((e) => statSync(`${ROOT}test/integration/${e}`).isDirectory()).map((e) => `test/integration/${e}`),
    ];
    expect(wanted.filter((path) => !named.has(path))).toEqual([]);
  });
});
