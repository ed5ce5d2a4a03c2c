// `fencekeeper demo` (what `npm run demo` runs once the servers are up), as a
// process against the real servers: with fencing every resource refuses the
// paused holder's stale write and the demo exits 0; with fencing disabled the
// same timeline corrupts every resource and the demo exits 1. The second run
// is the proof that the demo's verdict can fail.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { serverEnvironment } from '../helpers/servers.js';
import { uniqueLockName } from '../helpers/unique.js';

const BIN = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));

function demo(extra: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  if (!existsSync(BIN)) throw new Error(`${BIN} is missing: run 'npm run build' first (npm test does)`);
  const env = {
    ...process.env,
    ...serverEnvironment(),
    // Each run its own lock, so demo runs and other tests never queue behind each other.
    DEMO_LOCK: uniqueLockName('demo'),
  };
  const child = spawn(process.execPath, [BIN, 'demo', ...extra], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

describe('fencekeeper demo', () => {
  it("plays the timeline: every resource refuses the paused holder's stale write", { timeout: 120_000 }, async () => {
    const run = await demo([]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/\| A\s+\| \d+\s+\| SIGSTOP/);
    expect(run.stdout).toMatch(/A's session times out/);
    expect(run.stdout).toMatch(/reads lock\.held .*\| false/);
    expect(run.stdout.match(/with its old token\s+\| refused/g)).toHaveLength(3);
    expect(run.stdout).toContain('PASS');
    // Every line stands on its own: no references to notes a user has never seen.
    expect(run.stdout).not.toMatch(/seed \d|design note/i);
  });

  it('fails (exit 1) when fencing is disabled: the stale writes land', { timeout: 120_000 }, async () => {
    const run = await demo(['--unfenced']);
    expect(run.code).toBe(1);
    expect(run.stdout.match(/with its old token\s+\| accepted/g)).toHaveLength(3);
    expect(run.stdout).toContain('ACCEPTED');
    expect(run.stdout).toContain('FAIL');
  });
});
