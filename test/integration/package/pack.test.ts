// The package as a user installs it: `npm pack` of a copy of the working
// tree as a fresh clone has it (no dist/: the prepack script must build it),
// the tarball installed with its peers into a fresh folder outside this
// repository, then from there: the README's lock + PostgreSQL example runs,
// the bin answers, and code using every entry point type-checks against the
// installed declarations under the strictest settings a user may have
// (strict, exactOptionalPropertyTypes, noUncheckedIndexedAccess, module
// nodenext, lib checks on), with Express 5's types and with Express 4's.
//
// The peers come from the npm registry at the versions this repository has
// installed, so the local npm cache answers (--prefer-offline); nothing else
// is fetched.
import { execFile, spawn } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokenLinks, pendingGuide } from '../../helpers/doc-links.js';
import { testServers } from '../../helpers/servers.js';
import { uniqueTable } from '../../helpers/unique.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.on('error', (error) => resolve({ code: null, stdout, stderr: `${stderr}${error.message}` }));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function mustRun(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv = {}): Promise<string> {
  const result = await run(command, args, cwd, env);
  if (result.code !== 0) throw new Error(`${command} ${args.join(' ')} (in ${cwd}) exited ${String(result.code)}:\n${result.stdout}\n${result.stderr}`);
  return result.stdout;
}

/** The version of a package this repository has installed (so the npm cache has it). */
async function installed(name: string): Promise<string> {
  return (JSON.parse(await readFile(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
}

/** The README's TypeScript block under `heading` (a ## or ### heading). */
async function readmeBlock(heading: string): Promise<string> {
  const readme = await readFile(join(ROOT, 'README.md'), 'utf8');
  const at = readme.search(new RegExp(`^#{2,3} ${heading}\n`, 'm'));
  const open = readme.indexOf('```ts\n', at);
  const close = readme.indexOf('\n```', open + 6);
  if (at === -1 || open === -1 || close === -1) throw new Error(`README.md has no TypeScript example under "${heading}"`);
  return readme.slice(open + 6, close);
}

// What a user writes: every entry point, the typed handler, the test kit.
// The @ts-expect-error lines prove the types are real (an `any` would make
// them unused, which is an error too).
const TYPED = `
import express from 'express';
import pg from 'pg';
import { parseToken, StaleTokenError, type FencingToken, type Lock } from 'fencekeeper';
import { ZooKeeperClient, acquireLock } from 'fencekeeper/zookeeper';
import { PostgresFenceStore, migrate, withFence } from 'fencekeeper/postgres';
import { fencedHandler, fencing, hasFencing, MemoryFenceStore, type FencingContext } from 'fencekeeper/express';
import { TcpProxy, WriteHistory, checkHistory, expireSession, sessionRecorder, startZooKeeper } from 'fencekeeper/testing';

export async function main(pool: pg.Pool): Promise<FencingToken> {
  const server = await startZooKeeper({ tickTimeMs: 100 });
  const proxy = await TcpProxy.start({ port: server.port }, { observe: (chunk, from) => void [chunk.length, from] });
  const zk = await ZooKeeperClient.connect({ connectString: proxy.address, connector: sessionRecorder() });
  await migrate(pool);
  const lock: Lock = await acquireLock(zk, 'jobs/reindex', { timeoutMs: 1000 });
  const count = await withFence(pool, 'jobs/reindex', lock.token, async (client) => (await client.query('select 1')).rowCount);
  const rows: number | null = count;
  void rows;
  const history = new WriteHistory();
  await history.record(lock.token, async (id) => id, { refused: (e) => e instanceof StaleTokenError });
  const verdict: boolean = checkHistory({ writes: history.writes, applied: [] }).valid;
  void verdict;
  await expireSession(zk);
  // @ts-expect-error -- tokens are bigints, never numbers
  parseToken(34);
  await proxy.close();
  await server.stop();
  return lock.token;
}

const app = express();
const fence = fencing({ store: new MemoryFenceStore(), resource: (req) => 'doc:' + String(req.params['id']) });
app.put('/docs/:id', fence, fencedHandler(async (req, res) => {
  const context: FencingContext = req.fencing;
  res.json({ token: String(context.token), resource: req.fencing.resource });
}));
app.put('/plain/:id', fence, (req, res) => {
  // @ts-expect-error -- possibly undefined on a route that may lack fencing()
  void req.fencing.token;
  res.json({ fenced: hasFencing(req) ? String(req.fencing.token) : null });
});
fencedHandler<pg.PoolClient>(async (req) => {
  await req.fencing.transaction.query('select 1');
});
new PostgresFenceStore(new pg.Pool());
`;

const STRICT: ts.CompilerOptions = {
  strict: true,
  exactOptionalPropertyTypes: true,
  noUncheckedIndexedAccess: true,
  noImplicitOverride: true,
  verbatimModuleSyntax: true,
  skipLibCheck: false,
  noEmit: true,
  target: ts.ScriptTarget.ES2022,
  lib: ['lib.es2023.d.ts'],
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  types: ['node'],
};

describe('the packed package, installed', () => {
  let work: string;
  let tarball: string;
  let packed: string[];
  const apps: Record<4 | 5, string> = { 4: '', 5: '' };
  let schema: string;
  let admin: pg.Pool;

  beforeAll(async () => {
    work = await mkdtemp(join(tmpdir(), 'fencekeeper-pack-'));
    // 1. The working tree as a clone has it: tracked files and new ones not
    //    ignored, without dist/ and node_modules (linked: the build needs tsc).
    const clone = join(work, 'clone');
    const listed = await new Promise<string>((resolve, reject) =>
      execFile('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: ROOT, maxBuffer: 1 << 24 }, (error, stdout) => (error ? reject(error) : resolve(stdout))),
    );
    // (A worktree whose node_modules is a symlink lists it as an untracked file: never copy a directory.)
    for (const file of listed.split('\0').filter((f) => f !== '' && existsSync(join(ROOT, f)) && !statSync(join(ROOT, f)).isDirectory())) {
      await mkdir(dirname(join(clone, file)), { recursive: true });
      await copyFile(join(ROOT, file), join(clone, file));
    }
    expect(existsSync(join(clone, 'dist'))).toBe(false);
    await symlink(join(ROOT, 'node_modules'), join(clone, 'node_modules'), 'dir');
    // 2. npm pack: prepack builds dist/.
    const out = join(work, 'out');
    await mkdir(out);
    const [info] = JSON.parse(await mustRun('npm', ['pack', '--json', '--pack-destination', out], clone)) as [{ filename: string; files: { path: string }[] }];
    tarball = join(out, info.filename);
    packed = info.files.map((f) => f.path);
    // 3. Fresh folders outside the repository: the tarball and its peers.
    const peers = async (major: 4 | 5): Promise<string[]> => [
      `pg@${await installed('pg')}`,
      `@types/pg@${await installed('@types/pg')}`,
      `@types/node@${await installed('@types/node')}`,
      `typescript@${await installed('typescript')}`,
      ...(major === 5
        ? [`express@${await installed('express')}`, `@types/express@${await installed('@types/express')}`]
        : [`express@${await installed('express4')}`, `@types/express@${await installed('@types/express4')}`]),
    ];
    for (const major of [5, 4] as const) {
      const app = join(work, `app-express${major}`);
      await mkdir(app);
      await writeFile(join(app, 'package.json'), JSON.stringify({ name: `app-express${major}`, private: true, type: 'module' }));
      await mustRun('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball, ...(await peers(major))], app);
      apps[major] = app;
    }
    schema = uniqueTable('pack');
    admin = new pg.Pool({ connectionString: testServers().databaseUrl, max: 1 });
    await admin.query(`create schema ${schema}`);
  }, 600_000);

  afterAll(async () => {
    await admin?.query(`drop schema if exists ${schema} cascade`);
    await admin?.end();
    if (work !== undefined) await rm(work, { recursive: true, force: true });
  });

  it('the tarball holds the built entry points, their types, the bin and the migrations, and no sources or tests', async () => {
    const pkg = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, string | { types: string; default: string }>; bin: Record<string, string> };
    for (const [subpath, target] of Object.entries(pkg.exports)) {
      const files = typeof target === 'string' ? [target] : [target.types, target.default];
      for (const file of files) expect(packed, `${subpath} -> ${file}`).toContain(file.replace(/^\.\//, ''));
    }
    for (const bin of Object.values(pkg.bin)) expect(packed).toContain(bin.replace(/^\.\//, ''));
    expect(packed).toContain('migrations/001_fences.sql');
    expect(packed).toContain('README.md');
    expect(packed).toContain('LICENSE');
    expect(packed).toContain('CHANGELOG.md');
    expect(packed.filter((f) => f.startsWith('test/') || f.startsWith('src/') || f.startsWith('adapters/') || f.startsWith('dist/test/'))).toEqual([]);
    expect(packed.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
  });

  it('stack traces can show the sources: the maps carry them (sourcesContent), and the license is MIT', async () => {
    const installedAt = join(apps[5], 'node_modules', 'fencekeeper');
    const map = JSON.parse(await readFile(join(installedAt, 'dist', 'adapters', 'postgres', 'database.js.map'), 'utf8')) as { sources: string[]; sourcesContent?: (string | null)[] };
    expect(map.sourcesContent).toHaveLength(map.sources.length);
    expect(map.sourcesContent?.[0]).toContain('export async function run(');
    expect(await readFile(join(installedAt, 'LICENSE'), 'utf8')).toContain('Copyright (c) 2026 the fencekeeper authors');
    expect(JSON.parse(await readFile(join(installedAt, 'package.json'), 'utf8'))).toMatchObject({ license: 'MIT', engines: { node: '>=20.19' } });
  });

  it('its pages (README.md, docs/) link only to files the tarball holds', async () => {
    const installedAt = join(apps[5], 'node_modules', 'fencekeeper');
    const files = new Set(packed);
    const read = (path: string): string => readFileSync(join(installedAt, path), 'utf8');
    const pkg = JSON.parse(read('package.json')) as { exports: Record<string, unknown> };
    const pages = packed.filter((f) => f.endsWith('.md'));
    expect(pages).toContain('docs/guarantees.md');
    expect(pages.flatMap((page) => brokenLinks(page, read(page), files, read, pendingGuide(pkg.exports)))).toEqual([]);
  });

  it('CommonJS require() loads it (Node >= 20.19)', async () => {
    const required = await mustRun(process.execPath, ['-e', "const fk = require('fencekeeper'); const pgAdapter = require('fencekeeper/postgres'); console.log(String(fk.parseToken('7')), typeof pgAdapter.withFence)"], apps[5]);
    expect(required.trim()).toBe('7 function');
  });

  it('runs the README\'s lock + PostgreSQL example from the installed package', async () => {
    const code = await readmeBlock('A lock and a PostgreSQL write');
    const js = ts.transpileModule(code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
    await writeFile(join(apps[5], 'example.mjs'), js);
    // Its own schema: the fence table and the example's table are this test's.
    const url = new URL(testServers().databaseUrl);
    url.searchParams.set('options', `-c search_path=${schema}`);
    const result = await run(process.execPath, ['example.mjs'], apps[5], { ZOOKEEPER: testServers().zkStandalone, DATABASE_URL: url.toString() });
    expect(result.stderr).toBe('');
    expect(result.code).toBe(0);
    const token = /^wrote with token (\d+)$/m.exec(result.stdout)?.[1];
    expect(token).toBeDefined();
    const { rows } = await admin.query(`select body, fencing_token::text as token from ${schema}.readme_reports where id = 1`);
    expect(rows).toEqual([{ body: 'done', token }]);
    const fences = await admin.query(`select token::text as token from ${schema}.fencekeeper_fences where resource = 'readme/reindex'`);
    expect(fences.rows).toEqual([{ token }]);
  });

  it('the installed bin runs', async () => {
    const help = await run(join(apps[5], 'node_modules', '.bin', 'fencekeeper'), ['status', '--help'], apps[5]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('--watch');
  });

  it.each([5, 4] as const)('code using every entry point, and the README example, type-check against the installed types (strict, nodenext, Express %i)', async (major) => {
    const app = apps[major];
    const file = join(app, 'check.mts');
    await writeFile(file, TYPED);
    // The README's first example, verbatim, as a user pastes it into a strict project.
    const readmeExample = join(app, 'readme-example.mts');
    await writeFile(readmeExample, await readmeBlock('A lock and a PostgreSQL write'));
    // The TypeScript installed there, resolving from there: what the user's tsc sees.
    const installedTs = (await import(join(app, 'node_modules', 'typescript', 'lib', 'typescript.js'))) as { default: typeof ts };
    // Resolved from there: the host's current directory is where @types and node_modules are looked up.
    const host = installedTs.default.createCompilerHost(STRICT);
    host.getCurrentDirectory = () => app;
    const program = installedTs.default.createProgram([file, readmeExample], STRICT, host);
    const problems = installedTs.default.getPreEmitDiagnostics(program).map((d) => {
      const where = d.file === undefined ? '' : `${d.file.fileName.slice(app.length + 1)}:${d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1}: `;
      return where + installedTs.default.flattenDiagnosticMessageText(d.messageText, '\n');
    });
    expect(problems).toEqual([]);
    // The types came from the tarball and that Express, not from this repository.
    const express = JSON.parse(await readFile(join(app, 'node_modules', '@types', 'express', 'package.json'), 'utf8')) as { version: string };
    expect(Number(express.version.split('.')[0])).toBe(major);
    expect(program.getSourceFiles().map((f) => f.fileName).filter((f) => f.includes('/node_modules/fencekeeper/dist/')).length).toBeGreaterThan(5);
    expect(program.getSourceFiles().filter((f) => f.fileName.startsWith(ROOT)).map((f) => f.fileName)).toEqual([]);
  });
});
