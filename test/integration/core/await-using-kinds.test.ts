// `await using` on the lock kinds, compiled by tsc: a user's program (target
// ES2022, as this package builds, so tsc lowers the declarations itself)
// declares a read lock, a write lock and a permit with `await using` on the
// ZooKeeper standalone server and on the etcd node, leaves each block once at
// its end and once by a throw, and after each block reads whether the grant
// still claims to be held and whether a conflicting grant is taken at once
// by another client (a writer after a reader or a writer, a permit of 1 after
// a permit of 1). The program prints what it saw; the test checks it.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { testServers } from '../../helpers/servers.js';
import { uniqueLockName } from '../../helpers/unique.js';

const dist = (path: string): string => JSON.stringify(pathToFileURL(resolve(path)).href);
const etcd3 = JSON.stringify(pathToFileURL(createRequire(import.meta.url).resolve('etcd3')).href);

/** The program's opening for each source: `source` and `other` (a second client), closed by `await using` or at exit. */
const OPEN = {
  zookeeper: () => `
    import { ZooKeeperClient, zookeeperSource } from ${dist('dist/src/sources/zookeeper/index.js')};
    const connectString = ${JSON.stringify(testServers().zkStandalone)};
    await using zk1 = await ZooKeeperClient.connect({ connectString, sessionTimeoutMs: 4000 });
    await using zk2 = await ZooKeeperClient.connect({ connectString, sessionTimeoutMs: 4000 });
    const source = zookeeperSource(zk1);
    const other = zookeeperSource(zk2);
  `,
  etcd: () => `
    import { Etcd3 } from ${etcd3};
    import { etcdSession, etcdSource } from ${dist('dist/src/sources/etcd/index.js')};
    const hosts = ${JSON.stringify(new URL(testServers().etcd).host)};
    const etcd1 = new Etcd3({ hosts });
    const etcd2 = new Etcd3({ hosts });
    process.on('exit', () => { etcd1.close(); etcd2.close(); });
    await using session1 = etcdSession(etcd1, { ttlSeconds: 5 });
    await using session2 = etcdSession(etcd2, { ttlSeconds: 5 });
    const source = etcdSource(etcd1, { ttlSeconds: 5 });
    const other = etcdSource(etcd2, { ttlSeconds: 5 });
  `,
} as const;

function program(open: string, name: string): string {
  return `
    ${open}
    const name = ${JSON.stringify(name)};
    type Kind = 'read' | 'write' | 'permit';
    type Grant = { readonly held: boolean; readonly token: bigint; release(): Promise<void> };
    const take = (kind: Kind): Promise<Grant> =>
      kind === 'read' ? source.acquireReadLock(name, { timeoutMs: 5000 })
      : kind === 'write' ? source.acquireWriteLock(name, { timeoutMs: 5000 })
      : source.acquirePermit(name, { permits: 1, timeoutMs: 5000 });
    // What conflicts with every kind: a writer (read, write), a permit of the one slot (permit).
    const conflicting = (kind: Kind): Promise<Grant | null> =>
      kind === 'permit' ? other.tryAcquirePermit(name, { permits: 1 }) : other.tryAcquireWriteLock(name);
    const seen: { kind: Kind; how: string; heldInside: boolean; blockedInside: boolean; heldAfter: boolean; freeAfter: boolean; error: string | null }[] = [];
    async function scoped(kind: Kind, fail: boolean): Promise<void> {
      let grant: Grant | undefined;
      let heldInside = false;
      let blockedInside = false;
      let error: string | null = null;
      try {
        await using g = await take(kind);
        grant = g;
        heldInside = g.held;
        blockedInside = (await conflicting(kind)) === null;
        if (fail) throw new Error('boom');
      } catch (e) {
        error = (e as Error).message;
      }
      const next = await conflicting(kind);
      seen.push({ kind, how: fail ? 'throw' : 'end', heldInside, blockedInside, heldAfter: grant?.held ?? true, freeAfter: next !== null, error });
      await next?.release();
    }
    for (const kind of ['read', 'write', 'permit'] as const) {
      await scoped(kind, false);
      await scoped(kind, true);
    }
    console.log(JSON.stringify(seen));
  `;
}

describe.each(['zookeeper', 'etcd'] as const)('await using on the lock kinds, compiled by tsc: %s', (kind) => {
  it('a read lock, a write lock and a permit are released when their block ends and when it throws', async () => {
    const name = uniqueLockName(`kinds_using_tsc_${kind}`);
    const out = ts.transpileModule(program(OPEN[kind](), name), {
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext },
      reportDiagnostics: true,
    });
    expect(out.diagnostics ?? []).toEqual([]);
    // tsc lowered the declarations (Node 20 has the symbol, not the syntax).
    expect(out.outputText).not.toMatch(/await using/);
    expect(out.outputText).toMatch(/__addDisposableResource/);
    const dir = await mkdtemp(join(tmpdir(), 'fk-kinds-using-'));
    try {
      await writeFile(join(dir, 'program.mjs'), out.outputText);
      const { stdout } = await promisify(execFile)(process.execPath, [join(dir, 'program.mjs')], { timeout: 60_000 });
      const seen = JSON.parse(stdout.trim().split('\n').at(-1)!) as unknown[];
      const expected = (['read', 'write', 'permit'] as const).flatMap((k) =>
        (['end', 'throw'] as const).map((how) => ({
          kind: k,
          how,
          heldInside: true,
          blockedInside: true,
          heldAfter: false,
          freeAfter: true,
          error: how === 'throw' ? 'boom' : null,
        })),
      );
      expect(seen).toEqual(expected);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
