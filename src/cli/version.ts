/** `fencekeeper --version`: the version of the installed package, read from its package.json when asked. */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package's version. Read at run time, not compiled in, so the number
 * printed is the one of the package.json that shipped beside this file
 * (dist/src/cli/ in the package, src/cli/ in a checkout): the nearest
 * package.json above it named fencekeeper.
 */
export function packageVersion(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    let manifest: { name?: unknown; version?: unknown } | undefined;
    try {
      manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as typeof manifest;
    } catch {
      // none here (or unreadable): look further up
    }
    if (manifest?.name === 'fencekeeper' && typeof manifest.version === 'string') return manifest.version;
    const parent = dirname(dir);
    if (parent === dir) throw new Error('fencekeeper: no package.json of fencekeeper above the CLI');
    dir = parent;
  }
}
