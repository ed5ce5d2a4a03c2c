// The API reference (`npm run docs`, TypeDoc over typedoc.json) builds with
// zero warnings: every export of every entry point has a doc comment, and no
// public type names an unexported one (beyond the structural peer shapes
// typedoc.json lists). typedoc.json must cover every entry point of
// package.json "exports", so a new entry is documented too. TypeDoc writes to
// a temporary folder, whose JSON model is then read: every doc comment an
// editor shows on hover must stand alone, so none may point at a source file
// ("./x.ts", "the header of this file"), which the package does not ship.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

interface Exported {
  readonly types: string;
}

describe('the API reference', () => {
  it('covers every entry point of package.json exports', () => {
    const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, 'utf8')) as { exports: Record<string, Exported | string> };
    const config = JSON.parse(readFileSync(`${ROOT}typedoc.json`, 'utf8')) as { entryPoints: string[]; treatWarningsAsErrors: boolean; validation: Record<string, boolean> };
    // ./dist/src/index.d.ts is built from src/index.ts.
    const sources = Object.values(pkg.exports)
      .filter((target): target is Exported => typeof target === 'object')
      .map((target) => target.types.replace(/^\.\/dist\//, '').replace(/\.d\.ts$/, '.ts'));
    expect([...config.entryPoints].sort()).toEqual([...sources].sort());
    expect(config.treatWarningsAsErrors).toBe(true);
    expect(config.validation).toMatchObject({ notDocumented: true, notExported: true, invalidLink: true });
  });

  it('builds with no warning (npm run docs), and no doc comment points at a source file', { timeout: 400_000 }, async () => {
    const out = mkdtempSync(join(tmpdir(), 'fk-typedoc-'));
    const model = join(out, 'model.json');
    const child = spawn(process.execPath, [`${ROOT}node_modules/typedoc/bin/typedoc`, '--out', join(out, 'html'), '--json', model, '--logLevel', 'Warn'], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(output.split('\n').filter((line) => /warning|error/i.test(line))).toEqual([]);
    expect(code).toBe(0);
    try {
      expect(sourceFileReferences(JSON.parse(readFileSync(model, 'utf8')) as Reflection)).toEqual([]);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });

  it('the source-file check finds what it looks for', () => {
    const model: Reflection = {
      name: 'fencekeeper',
      children: [
        { name: 'ok', comment: { summary: [{ text: 'Stands alone: see LockLostError.' }] } },
        { name: 'file', comment: { summary: [{ text: 'The queue (./queue.ts).' }] } },
        { name: 'fn', signatures: [{ name: 'fn', comment: { summary: [{ text: 'See the header of this file.' }] } }] },
        { name: 'tag', comment: { summary: [], blockTags: [{ content: [{ text: 'as in ../../queue-grant.ts' }] }] } },
        { name: 'inherited', inheritedFrom: {}, comment: { summary: [{ text: './old-api-module.js' }] } },
      ],
    };
    expect(sourceFileReferences(model)).toEqual(['fencekeeper.file: ./queue.ts', 'fencekeeper.fn(): header of this file', 'fencekeeper.tag: ../../queue-grant.ts']);
  });
});

interface Comment {
  readonly summary: readonly { readonly text?: string }[];
  readonly blockTags?: readonly { readonly content: readonly { readonly text?: string }[] }[];
}
interface Reflection {
  readonly name: string;
  readonly comment?: Comment;
  /** Set on members a class or interface inherits, e.g. from @types/express: their text is not ours. */
  readonly inheritedFrom?: unknown;
  readonly children?: readonly Reflection[];
  readonly signatures?: readonly Reflection[];
}

const SOURCE_FILE = /\.\.?\/[\w/.-]+\.(?:ts|js)\b|header of this file|top of this file/;

/** `path: match` for every comment (a member's or a signature's) that names a source file. */
function sourceFileReferences(node: Reflection, path = ''): string[] {
  const here = path === '' ? node.name : `${path}.${node.name}`;
  const found: string[] = [];
  const check = (comment: Comment | undefined, at: string): void => {
    if (comment === undefined) return;
    const text = [...comment.summary.map((part) => part.text ?? ''), ...(comment.blockTags ?? []).flatMap((tag) => tag.content.map((part) => part.text ?? ''))].join('');
    const match = SOURCE_FILE.exec(text);
    if (match !== null) found.push(`${at}: ${match[0]}`);
  };
  if (node.inheritedFrom === undefined) {
    check(node.comment, here);
    for (const signature of node.signatures ?? []) check(signature.comment, `${here}()`);
  }
  for (const child of node.children ?? []) found.push(...sourceFileReferences(child, here));
  return found;
}
