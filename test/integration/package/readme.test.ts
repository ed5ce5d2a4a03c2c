// Every code example in README.md runs here, as a user would run it: the
// TypeScript blocks (```ts) are transpiled and executed by Node as modules
// inside this package, so `import ... from 'fencekeeper'` resolves through
// the package's exports map to the build, and a block that imports from
// 'vitest' (a user's own test) runs as a test file under a vitest of its own
// (not this suite's config, servers or setup); the shell blocks (```sh) run with a
// `fencekeeper` bin on PATH. ```console blocks (the quick start and
// development commands) are what CI and a developer run themselves.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { DeleteTableCommand, DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DeleteObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import mysql from 'mysql2/promise';
import pg from 'pg';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serverEnvironment, testServers } from '../../helpers/servers.js';
import { holdRedisFaults } from '../redis/helpers.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const WORK = `${ROOT}.tmp/readme-examples/`;

interface Block {
  readonly lang: string;
  readonly code: string;
  readonly heading: string;
}

function blocks(markdown: string): Block[] {
  const out: Block[] = [];
  let heading = '';
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.startsWith('#')) heading = line.replace(/^#+\s*/, '');
    const open = /^```(\w+)\s*$/.exec(line);
    if (open === null) continue;
    const body: string[] = [];
    for (i++; i < lines.length && lines[i] !== '```'; i++) body.push(lines[i] as string);
    out.push({ lang: open[1] as string, code: body.join('\n'), heading });
  }
  return out;
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

const readme = await readFile(`${ROOT}README.md`, 'utf8');
const all = blocks(readme);
const typescript = all.filter((b) => b.lang === 'ts');
const shell = all.filter((b) => b.lang === 'sh');

// What each example must print, by its section heading: running is not
// enough, the example must do what the README says it does.
const EXPECTED: Record<string, RegExp> = {
  'A lock and a PostgreSQL write': /^wrote with token \d+$/m,
  'A lock and a MySQL/MariaDB write': /^refused: presented (\d+), current (\d+)\nwrote with token \2$/m,
  'A lock and an S3 object': /^refused: presented (\d+), current (\d+)\nobject fence: \2\nbody "no changes today" written with token \2$/m,
  'A lock and a DynamoDB item': /^refused: presented (\d+), current (\d+)\nitem fence: \2, tombstone true$/m,
  'An HTTP service that refuses stale tokens': /^200 403$/m,
  // The outside effect ran once; the retry was answered from the ledger (ts),
  // and nothing of it is left pending (sh).
  'Resources that cannot check a token: withEffect and idempotency()': /^(ran recorded ch_1 1|no pending effects)$/m,
  'Leader election': /^leader worker-1 with epoch \d+ true$/m,
  'Locks over Redis: fencekeeper/redis': /^(redis token \d+ held true\nredlock token \d+ held true|redis run with token \d+\nredlock run with token \d+)$/m,
  'Redis keys as a fenced resource': /^wrote "report v1" with token (\d+)\nrefused: presented \d+, current \1\nafter delete: null, fence \1\nstore mark \1$/m,
  'A lock over etcd: fencekeeper/etcd': /^token \d+ is the create revision of fencekeeper\/locks\/readme\/etcd-nightly\/#[0-9a-f]+-\d+, held true$/m,
  'Scoped locks and sequencers': /^bound to lock readme\/index at zookeeper\nthe guarding lock wrote\nrefused a token of readme\/other: SEQUENCER_MISMATCH\nrefused a token of readme\/other: SEQUENCER_MISMATCH\nrefused a bare token: SEQUENCER_MISMATCH\nrefused a bare token: SEQUENCER_MISMATCH$/m,
  'The CLI': /^token \d+ for readme\/nightly\nleader with epoch \d+\nreadme\/nightly: free/m,
  'Testing your code against lock loss: fencekeeper/testing': /^\s*Tests\s+1 passed \(1\)$/m,
  'Observability: diagnostics channels and OpenTelemetry': /^fencekeeper_fence_refused_total\{fencekeeper_adapter="s3",fencekeeper_resource="s3:\/\/readme-reports\/observed\.txt",error_type="STALE_TOKEN",otel_scope_name="fencekeeper"\} 1$/m,
};

/** A user's own test file: it imports from vitest. */
const isTestFile = (block: Block): boolean => /from 'vitest'/.test(block.code);

describe('README examples', () => {
  let env: NodeJS.ProcessEnv;
  let giveBackRedis: (() => Promise<void>) | undefined;

  beforeAll(async () => {
    if (!existsSync(`${ROOT}dist/src/index.js`)) throw new Error("dist/ is missing: run 'npm run build' first (npm test does)");
    // The Redis examples need all five Redlock nodes up, as a user's would be:
    // wait out the files that kill or pause them (the Redis set's fault turn).
    giveBackRedis = await holdRedisFaults();
    const servers = testServers();
    // The examples use fixed names, as a user's code would. Fences from an
    // earlier run against another ZooKeeper (a throw-away test server starts
    // its zxids, hence its tokens, from zero again) would refuse this run's
    // tokens as stale, exactly as they should: start from clean resources.
    const pool = new pg.Pool({ connectionString: servers.databaseUrl, max: 1 });
    try {
      await pool.query("select to_regclass('fencekeeper_fences') is not null as ok").then(async ({ rows }) => {
        if ((rows[0] as { ok: boolean }).ok) await pool.query("delete from fencekeeper_fences where resource like 'readme/%'");
      });
      // Bindings of earlier runs (another test ZooKeeper has another identity): bind afresh.
      await pool.query("select to_regclass('fencekeeper_fence_bindings') is not null as ok").then(async ({ rows }) => {
        if ((rows[0] as { ok: boolean }).ok) await pool.query("delete from fencekeeper_fence_bindings where resource like 'readme/%'");
      });
      // The effect ledger's rows of earlier runs: the example's effect must run again.
      await pool.query("select to_regclass('fencekeeper_effects') is not null as ok").then(async ({ rows }) => {
        if ((rows[0] as { ok: boolean }).ok) await pool.query("delete from fencekeeper_effects where resource like 'readme/%'");
      });
      await pool.query('drop table if exists readme_reports');
      // The bound table of the sequencers example: unbound and dropped, so each run binds it afresh.
      await pool.query("select to_regclass('fencekeeper_table_bindings') is not null as ok").then(async ({ rows }) => {
        if ((rows[0] as { ok: boolean }).ok) await pool.query("delete from fencekeeper_table_bindings where relation = to_regclass('readme_pages')");
      });
      await pool.query('drop table if exists readme_pages');
    } finally {
      await pool.end();
    }
    // The MySQL/MariaDB example's fence and table, likewise.
    const my = mysql.createPool({ uri: servers.mysql, connectionLimit: 1 });
    try {
      const [found] = await my.query("SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'fencekeeper_fences'");
      if (Number((found as { n: number }[])[0]?.n) > 0) await my.query("DELETE FROM fencekeeper_fences WHERE resource LIKE 'readme/%'");
      await my.query('DROP TABLE IF EXISTS readme_invoices');
    } finally {
      await my.end();
    }
    const s3 = new S3Client({ endpoint: servers.s3.endpoint, region: servers.s3.region, forcePathStyle: true, credentials: servers.s3.credentials });
    try {
      // The key, and the data objects its pointer named in earlier runs.
      const page = await s3.send(new ListObjectsV2Command({ Bucket: 'readme-reports', Prefix: 'daily.txt' })).catch(() => undefined);
      for (const Key of ['daily.txt', 'observed.txt', 'index.txt', ...(page?.Contents ?? []).map((o) => o.Key!)]) {
        await s3.send(new DeleteObjectCommand({ Bucket: 'readme-reports', Key })).catch(() => undefined);
      }
    } finally {
      s3.destroy();
    }
    // The DynamoDB example's table: its tombstone would refuse a fresh ZooKeeper's smaller tokens.
    const dynamodb = new DynamoDBClient({ endpoint: servers.dynamodb, region: 'us-east-1', credentials: { accessKeyId: 'test', secretAccessKey: 'test' } });
    try {
      await dynamodb.send(new DeleteTableCommand({ TableName: 'readme_reports' })).catch(() => undefined);
    } finally {
      dynamodb.destroy();
    }
    await mkdir(`${WORK}bin`, { recursive: true });
    await writeFile(`${WORK}bin/fencekeeper`, `#!/bin/sh\nexec "${process.execPath}" "${ROOT}dist/src/cli/main.js" "$@"\n`);
    await chmod(`${WORK}bin/fencekeeper`, 0o755);
    env = {
      ...serverEnvironment(servers),
      // The Redis examples' servers, as a user would name them.
      REDIS_URL: servers.redis,
      REDLOCK_NODES: servers.redlock.join(','),
      REDLOCK_URL: `redlock://${servers.redlock.map((u) => u.replace(/^redis:\/\//, '')).join(',')}`,
      ETCD: new URL(servers.etcd).host,
      // The DynamoDB example's server (dynalite here), as a user would name it.
      DYNAMODB_ENDPOINT: servers.dynamodb,
      MYSQL_URL: servers.mysql,
      PATH: `${WORK}bin:${process.env.PATH ?? ''}`,
    };
  }, 660_000);
  afterAll(async () => {
    await giveBackRedis?.();
    await rm(WORK, { recursive: true, force: true });
  }, 120_000);

  it('has the examples this test knows what to expect of', () => {
    expect(typescript.map((b) => b.heading)).toEqual([
      'A lock and a PostgreSQL write',
      'A lock and a MySQL/MariaDB write',
      'A lock and an S3 object',
      'A lock and a DynamoDB item',
      'An HTTP service that refuses stale tokens',
      'Resources that cannot check a token: withEffect and idempotency()',
      'Leader election',
      'Locks over Redis: fencekeeper/redis',
      'Redis keys as a fenced resource',
      'A lock over etcd: fencekeeper/etcd',
      'Scoped locks and sequencers',
      'Testing your code against lock loss: fencekeeper/testing',
      'Observability: diagnostics channels and OpenTelemetry',
    ]);
    expect(shell.map((b) => b.heading)).toEqual(['Resources that cannot check a token: withEffect and idempotency()', 'Locks over Redis: fencekeeper/redis', 'The CLI']);
    expect(readme).toContain('npm ci && npm test');
    expect(readme).toContain('npm ci && npm run demo');
  });

  it('the TypeScript examples type-check against the built package (strict)', async () => {
    const files: string[] = [];
    for (const [i, block] of typescript.entries()) {
      const file = `${WORK}typed-${i}.mts`;
      await writeFile(file, block.code);
      files.push(file);
    }
    const program = ts.createProgram(files, {
      strict: true,
      noEmit: true,
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      skipLibCheck: true,
      types: ['node'],
    });
    const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(problems).toEqual([]);
  });

  it('the console commands name scripts this package has', async () => {
    const { scripts } = JSON.parse(await readFile(`${ROOT}package.json`, 'utf8')) as { scripts: Record<string, string> };
    const commands = all.filter((b) => b.lang === 'console').flatMap((b) => [...b.code.matchAll(/npm (?:run ([\w:-]+)|(test))\b/g)]);
    expect(commands.length).toBeGreaterThan(0);
    for (const [, run, test] of commands) expect(scripts, `npm ${run ?? test}`).toHaveProperty(run ?? (test as string));
  });

  it.each(typescript.filter(isTestFile).map((b, i) => [b.heading, i, b] as const))('%s (a vitest file)', { timeout: 120_000 }, async (heading, i, block) => {
    const dir = `${WORK}vitest-${i}/`;
    await mkdir(dir, { recursive: true });
    await writeFile(`${dir}example.test.ts`, block.code);
    // Its own config: this suite's projects, global setup and servers are not the user's.
    await writeFile(`${dir}vitest.config.mjs`, "export default { test: { include: ['example.test.ts'] } };\n");
    const result = await run(process.execPath, [`${ROOT}node_modules/vitest/vitest.mjs`, 'run', '--root', dir, '--config', 'vitest.config.mjs'], { ...env, NO_COLOR: '1' });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toMatch(EXPECTED[heading] as RegExp);
  });

  it.each(typescript.filter((b) => !isTestFile(b)).map((b, i) => [b.heading, i, b] as const))('%s', { timeout: 60_000 }, async (heading, i, block) => {
    const js = ts.transpileModule(block.code, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: false },
      reportDiagnostics: false,
    }).outputText;
    // Inside the package, so the example imports 'fencekeeper' by its name.
    const file = `${WORK}example-${i}.mjs`;
    await writeFile(file, js);
    const result = await run(process.execPath, [file], env);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(EXPECTED[heading] as RegExp);
  });

  it.each(shell.map((b) => [b.heading, b] as const))('%s (shell)', { timeout: 60_000 }, async (heading, block) => {
    const result = await run('bash', ['-euo', 'pipefail', '-c', block.code], env);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(EXPECTED[heading] as RegExp);
  });
});
