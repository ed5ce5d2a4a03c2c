// One holder at a time for the ZooKeeper ensemble's faults, across
// processes: vitest's workers and scripts such as test/faults/run-checker.ts.
// Kept apart from servers.ts because that module imports 'vitest', which a
// plain Node script cannot load.
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';

/**
 * Hold the ensemble for fault injection (leader kills, node restarts) until
 * the returned release is called. vitest runs two files at once, and other
 * test runs may share the ensemble: two of them killing leaders together can
 * leave it without a quorum and break each other's assumptions (one reads
 * the leader, the other kills it). The
 * lock is a directory (mkdir is atomic) naming its owner's pid; an owner that
 * died leaves a lock the next caller takes over.
 */
export async function holdEnsembleForFaults(timeoutMs = 15 * 60_000): Promise<() => Promise<void>> {
  const dir = `${tmpdir()}/fencekeeper-ensemble-faults.lock`;
  const owner = `${dir}/owner`;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await mkdir(dir);
      await writeFile(owner, String(process.pid));
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const pid = Number(await readFile(owner, 'utf8').catch(() => ''));
      let alive = false;
      if (Number.isInteger(pid) && pid > 0) {
        try {
          process.kill(pid, 0);
          alive = true;
        } catch {
          alive = false;
        }
      }
      // No owner file yet: a caller between its mkdir and its write; wait for it.
      if (!alive && pid > 0) await rm(dir, { recursive: true, force: true });
      if (Date.now() > deadline) throw new Error(`the ensemble stayed held by pid ${pid} for ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return async () => {
    const pid = Number(await readFile(owner, 'utf8').catch(() => ''));
    if (pid === process.pid) await rm(dir, { recursive: true, force: true });
  };
}
