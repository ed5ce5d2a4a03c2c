// Shared by the PostgreSQL source's read-write and permit tests: a holder of
// one of those kinds in its own process (test/fixtures/postgres-kinds-holder.mjs),
// to SIGSTOP past its lease, with its stdout as a queue of parsed lines.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll } from 'vitest';
import { jsonLines } from '../../helpers/json-lines.js';
import { DATABASE_URL } from './helpers.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export interface KindsHolder {
  readonly child: ChildProcess;
  readonly token: bigint;
  readonly slot: number | null;
  /** The next line the holder prints, parsed. */
  next(): Promise<Record<string, unknown>>;
}

/** Children killed after the file (SIGCONT first: a stopped process must be able to die cleanly). */
export function kindsHolders(): (env: { schema: string; kind: 'read' | 'write' | 'permit'; lock: string; permits?: number; leaseMs: number; table: string; fence: string }) => Promise<KindsHolder> {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) {
      if (child.exitCode !== null || child.signalCode !== null) continue;
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  });
  return async (o) => {
    const child = spawn(process.execPath, [`${ROOT}test/fixtures/postgres-kinds-holder.mjs`], {
      cwd: ROOT,
      env: {
        ...process.env,
        DATABASE_URL,
        FK_SCHEMA: o.schema,
        FK_KIND: o.kind,
        FK_LOCK: o.lock,
        FK_PERMITS: String(o.permits ?? 1),
        FK_LEASE_MS: String(o.leaseMs),
        FK_TABLE: o.table,
        FK_FENCE: o.fence,
      },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    children.push(child);
    const next = jsonLines(child.stdout!);
    const first = await next();
    return { child, next, token: BigInt(first['token'] as string), slot: (first['slot'] as number | null) ?? null };
  };
}
