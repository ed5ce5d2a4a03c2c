// Every code example in README.md and docs/*.md runs here, as a user would
// run it. The pages are discovered (a new guide in docs/ is checked with no
// change to this file), and every runnable block says what it must print:
//
//   ```ts                          ← or ```sh
//   ...
//   ```
//   <!-- prints: ^wrote with token \d+$ -->
//
// The marker is the line right after the block: a JavaScript regex source
// (flag m) that the block's stdout must match. A ```ts or ```sh block without
// it fails this test, so no example goes unchecked; a fence spelled another
// way (```typescript, ```bash, ```js...) fails too, as it would escape the
// runner. ```console and ```text blocks are not run (the npm scripts a
// console block names must exist).
//
// The TypeScript blocks are type-checked together against the built package
// (strict, nodenext), then transpiled and executed by Node as modules inside
// this package, so `import ... from 'fencekeeper/...'` resolves through the
// package's exports map to dist/; a block that imports from 'vitest' (a
// user's own test) runs as a test file under a vitest of its own (not this
// suite's config, servers or setup). The shell blocks run under bash -euo
// pipefail with a `fencekeeper` bin on PATH. Each runs with stderr empty and
// exit code 0, and these environment variables naming the servers:
// ZOOKEEPER, DATABASE_URL, S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY,
// S3_SECRET_KEY, REDIS_URL, REDLOCK_NODES, REDLOCK_URL, ETCD (host:port),
// DYNAMODB_ENDPOINT, MYSQL_URL. Examples name their resources `readme/...` or
// `docs/...`: the fence rows of both are deleted before the run.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
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
const WORK = `${ROOT}.tmp/docs-examples/`;

/** The fences the runner knows; any other spelling of a code language is refused. */
const RUN = new Set(['ts', 'sh']);
const MISSPELLED = new Set(['typescript', 'tsx', 'mts', 'js', 'javascript', 'mjs', 'jsx', 'bash', 'shell', 'zsh']);

interface Block {
  /** Where it is, for the test names: `docs/redis.md:42 (Locks over Redis)`. */
  readonly where: string;
  readonly page: string;
  readonly lang: string;
  readonly code: string;
  /** The `<!-- prints: ... -->` regex source on the line after the block, if there is one. */
  readonly prints: string | undefined;
}

/** The fenced blocks of a Markdown page, each with its heading and its prints marker. */
function blocks(page: string, markdown: string): Block[] {
  const out: Block[] = [];
  let heading = '';
  const lines = markdown.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (/^#{1,6}\s/.test(line)) heading = line.replace(/^#+\s*/, '');
    // A fence as CommonMark reads it: up to 3 spaces, 3 or more backticks, an
    // info string whose first word is the language (```ts title="x" is ts).
    const open = /^( {0,3})(`{3,})[ \t]*([^`\s]*)[^`]*$/.exec(line);
    if (open === null) continue;
    const indent = (open[1] as string).length;
    const fence = open[2] as string;
    const start = i + 1;
    const body: string[] = [];
    for (i++; i < lines.length && !new RegExp(`^ {0,3}${fence}\`*\\s*$`).test(lines[i] as string); i++) body.push((lines[i] as string).slice(indent));
    const marker = /^ *<!-- prints: (.*) -->\s*$/.exec(lines[i + 1] ?? '');
    out.push({ where: `${page}:${start} (${heading})`, page, lang: open[3] as string, code: body.join('\n'), prints: marker?.[1] });
  }
  return out;
}

/** README.md, then every page of docs/ (found, not listed). */
function pages(): { page: string; text: string }[] {
  const docs = existsSync(`${ROOT}docs`) ? readdirSync(`${ROOT}docs`).filter((f) => f.endsWith('.md')).sort() : [];
  return ['README.md', ...docs.map((f) => `docs/${f}`)].map((page) => ({ page, text: readFileSync(`${ROOT}${page}`, 'utf8') }));
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

/** The block's marker as a regex: a block without one (or with a bad one) fails here. */
function expected(block: Block): RegExp {
  if (block.prints === undefined) throw new Error(`${block.where}: no <!-- prints: REGEX --> on the line after the block`);
  return new RegExp(block.prints, 'm');
}

const all = pages().flatMap(({ page, text }) => blocks(page, text));
const typescript = all.filter((b) => b.lang === 'ts');
const shell = all.filter((b) => b.lang === 'sh');

/** A user's own test file: it imports from vitest. */
const isTestFile = (block: Block): boolean => /from 'vitest'/.test(block.code);

/** Deletes `readme/%` and `docs/%` rows of `table` (by `column`) if the table exists. */
async function clearPg(pool: pg.Pool, table: string, column = 'resource'): Promise<void> {
  const { rows } = await pool.query('select to_regclass($1) is not null as ok', [table]);
  if ((rows[0] as { ok: boolean }).ok) await pool.query(`delete from ${table} where ${column} like 'readme/%' or ${column} like 'docs/%'`);
}

describe('README and docs/ examples', () => {
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
      await clearPg(pool, 'fencekeeper_fences');
      // Bindings of earlier runs (another test ZooKeeper has another identity): bind afresh.
      await clearPg(pool, 'fencekeeper_fence_bindings');
      // The effect ledger's rows of earlier runs: the example's effect must run again.
      await clearPg(pool, 'fencekeeper_effects');
      await pool.query('drop table if exists readme_reports');
      // docs/postgres.md's table: its rows' own token column would refuse a fresh ZooKeeper's tokens.
      await pool.query('drop table if exists docs_invoices');
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
      if (Number((found as { n: number }[])[0]?.n) > 0) await my.query("DELETE FROM fencekeeper_fences WHERE resource LIKE 'readme/%' OR resource LIKE 'docs/%'");
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

  it('every ```ts and ```sh block says what it prints, with a valid regex', () => {
    expect(typescript.length).toBeGreaterThan(0);
    const unchecked = [...typescript, ...shell].filter((b) => b.prints === undefined).map((b) => b.where);
    expect(unchecked, 'blocks without <!-- prints: REGEX --> on the line after them').toEqual([]);
    const invalid = [...typescript, ...shell].flatMap((b) => {
      try {
        expected(b);
        return [];
      } catch (error) {
        return [`${b.where}: ${(error as Error).message}`];
      }
    });
    expect(invalid).toEqual([]);
  });

  it('no code block is fenced in a way the runner would skip (```typescript, ```bash, ```js ...)', () => {
    expect(all.filter((b) => MISSPELLED.has(b.lang.toLowerCase())).map((b) => `${b.where}: \`\`\`${b.lang} (write \`\`\`ts or \`\`\`sh)`)).toEqual([]);
    expect(RUN.has('ts') && RUN.has('sh')).toBe(true);
  });

  it('the README keeps the two repository commands CI calls, in a console block', () => {
    const consoles = all.filter((b) => b.page === 'README.md' && b.lang === 'console').map((b) => b.code).join('\n');
    expect(consoles).toContain('npm ci && npm test');
    expect(consoles).toContain('npm ci && npm run demo');
  });

  it('the TypeScript examples type-check against the built package (strict)', async () => {
    const files: string[] = [];
    const origin = new Map<string, string>();
    await mkdir(WORK, { recursive: true });
    for (const [i, block] of typescript.entries()) {
      const file = `${WORK}typed-${i}.mts`;
      await writeFile(file, block.code);
      files.push(file);
      origin.set(file, block.where);
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
    const problems = ts.getPreEmitDiagnostics(program).map((d) => {
      const at = d.file === undefined ? '' : `${origin.get(d.file.fileName) ?? d.file.fileName} +${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: `;
      return at + ts.flattenDiagnosticMessageText(d.messageText, '\n');
    });
    expect(problems).toEqual([]);
  });

  it('the console commands name scripts this package has', async () => {
    const { scripts } = JSON.parse(await readFile(`${ROOT}package.json`, 'utf8')) as { scripts: Record<string, string> };
    const commands = all.filter((b) => b.lang === 'console').flatMap((b) => [...b.code.matchAll(/npm (?:run ([\w:-]+)|(test))\b/g)].map((m) => [b.where, m] as const));
    expect(commands.length).toBeGreaterThan(0);
    for (const [where, [, script, test]] of commands) expect(scripts, `${where}: npm ${script ?? test}`).toHaveProperty(script ?? (test as string));
  });

  it.each(typescript.filter(isTestFile).map((b, i) => [b.where, i, b] as const))('%s (a vitest file)', { timeout: 120_000 }, async (_where, i, block) => {
    const prints = expected(block);
    const dir = `${WORK}vitest-${i}/`;
    await mkdir(dir, { recursive: true });
    await writeFile(`${dir}example.test.ts`, block.code);
    // Its own config: this suite's projects, global setup and servers are not the user's.
    await writeFile(`${dir}vitest.config.mjs`, "export default { test: { include: ['example.test.ts'] } };\n");
    const result = await run(process.execPath, [`${ROOT}node_modules/vitest/vitest.mjs`, 'run', '--root', dir, '--config', 'vitest.config.mjs'], { ...env, NO_COLOR: '1' });
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(result.stdout).toMatch(prints);
  });

  it.each(typescript.filter((b) => !isTestFile(b)).map((b, i) => [b.where, i, b] as const))('%s', { timeout: 60_000 }, async (_where, i, block) => {
    const prints = expected(block);
    const js = ts.transpileModule(block.code, {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022, verbatimModuleSyntax: false },
      reportDiagnostics: false,
    }).outputText;
    // Inside the package, so the example imports 'fencekeeper' by its name.
    const file = `${WORK}example-${i}.mjs`;
    await mkdir(WORK, { recursive: true });
    await writeFile(file, js);
    const result = await run(process.execPath, [file], env);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(prints);
  });

  it.each(shell.map((b) => [b.where, b] as const))('%s (shell)', { timeout: 60_000 }, async (_where, block) => {
    const prints = expected(block);
    const result = await run('bash', ['-euo', 'pipefail', '-c', block.code], env);
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(prints);
  });
});
