// The API reference (`npm run docs`, TypeDoc over typedoc.json) builds with
// zero warnings: every export of every entry point has a doc comment, and no
// public type names an unexported one (beyond the structural peer shapes
// typedoc.json lists). typedoc.json must cover every entry point of
// package.json "exports", so a new entry is documented too. TypeDoc runs with
// --emit none: it validates without writing the site.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
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

  it('builds with no warning (npm run docs)', { timeout: 300_000 }, async () => {
    const child = spawn(process.execPath, [`${ROOT}node_modules/typedoc/bin/typedoc`, '--emit', 'none', '--logLevel', 'Warn'], { cwd: ROOT, env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (output += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (output += c));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    expect(output.split('\n').filter((line) => /warning|error/i.test(line))).toEqual([]);
    expect(code).toBe(0);
  });
});
