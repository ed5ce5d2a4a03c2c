// Benchmark: what the HTTP guards cost on the hot path, per framework, in one
// run: for Express 5, Fastify 5, Hono (over @hono/node-server) and the Fetch
// guard (a plain Fetch handler over @hono/node-server), the bare route vs the
// same empty handler behind the fencing guard with MemoryFenceStore (one
// resource, one token: every request admitted and committed). Beside them a
// "noop" route: the least middleware or hook of the guard's kind, handing its
// handler a context the framework's way (req.fencing, a decorated
// request.fencing, c.set, a second argument) and nothing else: the
// framework's own price of any such guard, so the gap to bare splits into
// the framework's share (noop vs bare) and the guard's own (guarded vs
// noop). And a "bound" route: the bare handler doing by hand, with the
// store's public promise API, the least a guard must do (read the header,
// parse the token, MemoryFenceStore admit, answer, commit): a reference.
// And the pair most routes are: "bare-json" and "guarded-json" answer a
// small JSON body the framework's usual way (res.json, a returned object,
// c.json, a Response of a string), bare and behind fencing().
// Not in the suite: a script that prints figures, nothing here asserts on time.
//
//   npm run build && node node_modules/vite-node/vite-node.mjs test/bench/http-guards.ts
//
// BENCH_DURATION (s per measurement, default 2), BENCH_ROUNDS (default 8),
// BENCH_CONNECTIONS (default 32). FK_BASELINE=<a checkout with dist/> adds,
// per framework, a third route guarded by that build's guards (e.g. main's,
// built in a scratch directory), measured in the same run: the before and
// after of a change side by side. BENCH_CPU_PROF=<dir>: the server process
// writes V8 CPU profiles (node --cpu-prof) there. One server process per
// framework (the built package, dist/), as an application runs one: the
// guards share their core, and four frameworks' requests through it in one
// process would make its calls see four kinds of objects, a cost no
// application pays. BENCH_COPIES (default 4) such servers per framework,
// each with the routes added in another (rotated) order, all warmed up
// first and kept for the run, take the rounds in turn: Express's router
// tries routes in the order they were added, so a route pays for every one
// before it (measured: about 1 µs per request per earlier route, which had
// put the guarded route, added fourth, about 3 µs behind the bare one,
// added first), and two processes serving the same route differ by a few
// µs per request (measured: 19.6 and 22.6 µs for Hono's bare route); so
// every route shares the places and the processes alike. The
// servers and autocannon do not share one core; within a round the routes
// are measured in alternating order; medians over rounds, and "vs bare" is
// the median of the per-round ratios against the same framework's bare route.
// The CPU column is the server process's CPU time per request (process.cpuUsage),
// user + system; the user column is its JavaScript and native code alone (the
// kernel's share of loopback TCP for both ends, and of waking the load
// generator, is charged to whichever side sends: system time moves with the
// timing of the two, though perf counts the same syscalls and packets per
// request for an unguarded and a guarded route).
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { barChartSpec, machineLine, writeSvg, type BarPoint } from './lib/chart.js';

const TOKEN = '34';
/** The chart's name of each route. */
const SERIES: Record<string, string> = {
  bare: 'bare',
  noop: 'no-op middleware',
  bound: 'by hand',
  guarded: 'fencing()',
  baseline: 'before (FK_BASELINE)',
  'bare-json': 'bare, JSON body',
  'guarded-json': 'fencing(), JSON body',
  'baseline-json': 'before, JSON body',
};
/** What the -json routes answer. */
const JSON_BODY = Object.freeze({ ok: true, id: 34 });
/** What the no-op routes hand their handler, as a guard hands its fencing context. */
const CONTEXT = Object.freeze({ resource: 'bench' });
/** The cores of a pinned run (BENCH_PIN): the load generator's, the servers'. */
const LOAD_CPU = 0;
const SERVER_CPU = 1;
const FRAMEWORKS = ['express', 'fastify', 'hono', 'fetch'] as const;
type Framework = (typeof FRAMEWORKS)[number];

if (process.argv.includes('--serve')) await serve(process.argv[process.argv.indexOf('--serve') + 1] as Framework, process.argv[process.argv.indexOf('--serve') + 2]!.split(','));
else await measure();

/** The guards of one build (a dist/ directory's adapters), by framework. */
async function guardsOf(dist: string) {
  return {
    express: await import(`${dist}express/index.js`),
    fastify: await import(`${dist}fastify/index.js`),
    hono: await import(`${dist}hono/index.js`),
    fetch: await import(`${dist}fetch/index.js`),
  };
}

/** The routes of a run: `baseline` ones when FK_BASELINE names a build. */
function routesOf(baseline: boolean): string[] {
  const builds = baseline ? ['guarded', 'baseline'] : ['guarded'];
  return ['bare', 'noop', 'bound', ...builds, 'bare-json', ...builds.map((route) => `${route}-json`)];
}

/** Serve the routes of `order` (routesOf()'s, rotated) under `framework`, added in that order, and report the port. */
async function serve(framework: Framework, order: readonly string[]): Promise<void> {
  const builds: [string, Awaited<ReturnType<typeof guardsOf>>][] = [['guarded', await guardsOf(new URL('../../dist/adapters/', import.meta.url).href)]];
  const { parseFencing } = (await import(new URL('../../dist/src/index.js', import.meta.url).href)) as typeof import('../../src/index.js');
  const { MemoryFenceStore } = builds[0]![1].fetch as typeof import('../../adapters/fetch/index.js');
  // The bound routes: one store per framework, the same resource and token as the guards'.
  const boundStore = { express: new MemoryFenceStore(), fastify: new MemoryFenceStore(), hono: new MemoryFenceStore(), fetch: new MemoryFenceStore() };
  type NodeHeaders = { headers: Record<string, string | string[] | undefined> };
  const tokenOf = (req: NodeHeaders): bigint | import('../../src/index.js').Sequencer => parseFencing(req.headers['fencing-token'] as string);
  const baseline = process.env.FK_BASELINE;
  if (baseline !== undefined && baseline !== '') builds.push(['baseline', await guardsOf(pathToFileURL(`${baseline}/dist/adapters/`).href)]);
  const { default: express } = await import('express');
  const { default: Fastify } = await import('fastify');
  const { Hono } = await import('hono');
  const { serve: honoServe } = await import('@hono/node-server');

  const port = (server: { address(): AddressInfo | string | null }): number => (server.address() as AddressInfo).port;
  /** How each route is added to the framework's one app; called in `order`. */
  let adders: Record<string, () => unknown> = {};
  let listen: () => Promise<number> = () => Promise.reject(new Error(`unknown framework ${framework}`));

  if (framework === 'express') {
    const e = express();
    e.disable('x-powered-by');
    e.disable('etag');
    adders = {
      bare: () => e.get('/bare', (_req, res) => void res.end()),
      // The least middleware that hands its handler a context on req, as fencing() does (req.fencing):
      // Express's own price of any such guard. (Express gives every request object a hidden class
      // of its own, so a property added to req is a new one each request: that is Express's, not the guard's.)
      noop: () => e.get('/noop', (req, _res, next) => { (req as unknown as { fencing: object }).fencing = CONTEXT; next(); }, (_req, res) => void res.end()),
      bound: () =>
        e.get('/bound', (req, res) => {
          void boundStore.express.admit('bench', tokenOf(req)).then((admission) => {
            res.end();
            void admission.commit();
          });
        }),
      'bare-json': () => e.get('/bare-json', (_req, res) => void res.json(JSON_BODY)),
    };
    for (const [route, g] of builds) {
      adders[route] = () => e.get(`/${route}`, g.express.fencing({ store: new g.express.MemoryFenceStore(), resource: 'bench' }), (_req: unknown, res: { end(): void }) => void res.end());
      adders[`${route}-json`] = () => e.get(`/${route}-json`, g.express.fencing({ store: new g.express.MemoryFenceStore(), resource: 'bench' }), (_req: unknown, res: { json(body: unknown): void }) => void res.json(JSON_BODY));
    }
    listen = () => new Promise<number>((resolve) => {
      const server = e.listen(0, '127.0.0.1', () => resolve(port(server)));
    });
  }
  if (framework === 'fastify') {
    const f = Fastify();
    adders = {
      bare: () => f.get('/bare', async (_request, reply) => reply.send()),
      // The least preHandler hook (a callback one, as fencing's) handing a context on a decorated
      // request property (as request.fencing): Fastify's own price of any guard that is a hook.
      noop: () =>
        f.register(async (scope) => {
          scope.decorateRequest('benchContext', undefined);
          scope.addHook('preHandler', (request, _reply, done) => {
            (request as unknown as { benchContext: object }).benchContext = CONTEXT;
            done();
          });
          scope.get('/noop', async (_request, reply) => reply.send());
        }),
      bound: () =>
        f.get('/bound', async (request, reply) => {
          const admission = await boundStore.fastify.admit('bench', tokenOf(request));
          void admission.commit();
          return reply.send();
        }),
      'bare-json': () => f.get('/bare-json', async () => JSON_BODY),
    };
    for (const [route, g] of builds) {
      adders[route] = () =>
        f.register(async (scope) => {
          await scope.register(g.fastify.fencing, { store: new g.fastify.MemoryFenceStore(), resource: 'bench' });
          scope.get(`/${route}`, async (_request, reply) => reply.send());
        });
      adders[`${route}-json`] = () =>
        f.register(async (scope) => {
          await scope.register(g.fastify.fencing, { store: new g.fastify.MemoryFenceStore(), resource: 'bench' });
          scope.get(`/${route}-json`, async () => JSON_BODY);
        });
    }
    listen = async () => {
      await f.listen({ port: 0, host: '127.0.0.1' });
      return port(f.server);
    };
  }
  if (framework === 'hono') {
    const h = new Hono();
    adders = {
      bare: () => h.get('/bare', (c) => c.body(null)),
      // The least middleware (Hono's are async) handing a context through c.set (as c.get('fencing')):
      // Hono's own price of any guard that is a middleware.
      noop: () => h.get('/noop', async (c, next) => { c.set('fencing' as never, CONTEXT as never); await next(); }, (c) => c.body(null)),
      // Node's headers (c.env.incoming), as the guard reads Node's rawHeaders: c.req.header() would build a Headers.
      bound: () =>
        h.get('/bound', async (c) => {
          const admission = await boundStore.hono.admit('bench', tokenOf((c.env as { incoming: NodeHeaders }).incoming));
          void admission.commit();
          return c.body(null);
        }),
      'bare-json': () => h.get('/bare-json', (c) => c.json(JSON_BODY)),
    };
    for (const [route, g] of builds) {
      adders[route] = () => h.get(`/${route}`, g.hono.fencing({ store: new g.hono.MemoryFenceStore(), resource: 'bench' }), (c) => c.body(null));
      adders[`${route}-json`] = () => h.get(`/${route}-json`, g.hono.fencing({ store: new g.hono.MemoryFenceStore(), resource: 'bench' }), (c) => c.json(JSON_BODY));
    }
    listen = () => new Promise<number>((resolve) => {
      honoServe({ fetch: h.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
  }
  if (framework === 'fetch') {
    // A Map from path to handler: the same steps for every route, wherever it was added. The bare route is the miss.
    const fetchRoutes = new Map<string, (request: Request, env: unknown) => Response | Promise<Response>>();
    // As Hono's c.json makes it (Response.json would make undici's own, not node-server's lightweight one).
    const json = (): Response => new Response(JSON.stringify(JSON_BODY), { headers: { 'content-type': 'application/json' } });
    // The least wrapper that waits for the handler, handing it a context (as withFencing's second argument).
    const contextHandler = (_request: Request, context: object): Response => (context === CONTEXT ? new Response(null) : new Response(null, { status: 500 }));
    adders = {
      bare: () => undefined,
      noop: () => fetchRoutes.set('/noop', async (request: Request) => await contextHandler(request, CONTEXT)),
      bound: () =>
        fetchRoutes.set('/bound', (_request: Request, env?: unknown) =>
          boundStore.fetch.admit('bench', tokenOf((env as { incoming: NodeHeaders }).incoming)).then((admission) => {
            void admission.commit();
            return new Response(null);
          }),
        ),
      'bare-json': () => fetchRoutes.set('/bare-json', () => Promise.resolve(json())),
    };
    for (const [route, g] of builds) {
      adders[route] = () => fetchRoutes.set(`/${route}`, g.fetch.withFencing({ store: new g.fetch.MemoryFenceStore(), resource: 'bench' }, () => new Response(null)));
      adders[`${route}-json`] = () => fetchRoutes.set(`/${route}-json`, g.fetch.withFencing({ store: new g.fetch.MemoryFenceStore(), resource: 'bench' }, json));
    }
    // The server's second argument passed on, as serve({ fetch: guarded }) would.
    const plain = (request: Request, env: unknown): Response | Promise<Response> => {
      const guarded = fetchRoutes.get(new URL(request.url).pathname);
      return guarded === undefined ? new Response(null) : guarded(request, env);
    };
    listen = () => new Promise<number>((resolve) => {
      honoServe({ fetch: plain, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
  }
  for (const route of order) await adders[route]!();
  const served = await listen();
  process.send!({ port: served });
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send!({ cpu: user + system, user });
    }
  });
  process.on('disconnect', () => process.exit(0));
}

async function measure(): Promise<void> {
  // autocannon ships no types: the little used here, typed by hand.
  type Result = { non2xx: number; errors: number; requests: { average: number; total: number }; latency: { p99: number } };
  const { default: autocannon } = (await import('autocannon' as string)) as { default: (options: object) => Promise<Result> };
  const duration = Number(process.env.BENCH_DURATION ?? 2);
  const rounds = Number(process.env.BENCH_ROUNDS ?? 8);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
  const viteNode = fileURLToPath(new URL('../../node_modules/vite-node/vite-node.mjs', import.meta.url));
  // BENCH_CPU_PROF=<dir>: the server process writes a V8 CPU profile there when it exits.
  const profile = process.env.BENCH_CPU_PROF;
  const execArgv = profile === undefined || profile === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${profile}`];
  // The load generator (this process, autocannon) and the servers each on a
  // core of their own, as on separate machines, so that neither ever waits
  // for the other's core (BENCH_PIN=0: left to the scheduler; on this
  // 2-core machine the ratios were the same either way, within the rounds'
  // spread). The kernel's work for loopback TCP is still charged to
  // whichever side sends.
  const pinned = process.env.BENCH_PIN !== '0' && cpus().length >= 2;
  if (pinned) pin(process.pid, LOAD_CPU);
  const routes = routesOf(process.env.FK_BASELINE !== undefined && process.env.FK_BASELINE !== '');
  const targets = FRAMEWORKS.flatMap((framework) => routes.map((route) => ({ framework, route, name: `${framework} ${route}` })));
  /** Start one server per framework, its routes added in `order`; resolves once each reported its port. */
  const start = async (order: readonly string[]): Promise<Map<Framework, { child: ChildProcess; port: number }>> => {
    const servers = new Map<Framework, { child: ChildProcess; port: number }>();
    for (const framework of FRAMEWORKS) {
      const child: ChildProcess = fork(viteNode, [fileURLToPath(import.meta.url), '--', '--serve', framework, order.join(',')], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv });
      const started = await new Promise<{ port: number }>((resolve, reject) => {
        child.once('message', (m) => resolve(m as { port: number }));
        child.once('exit', (code) => reject(new Error(`the ${framework} server exited (${code})`)));
      });
      if (pinned) pin(child.pid!, SERVER_CPU);
      servers.set(framework, { child, port: started.port });
    }
    return servers;
  };
  const cpu = (child: ChildProcess): Promise<{ cpu: number; user: number }> =>
    new Promise((resolve) => {
      const on = (m: unknown): void => {
        if (typeof (m as { cpu?: unknown }).cpu === 'number') {
          child.off('message', on);
          resolve(m as { cpu: number; user: number });
        }
      };
      child.on('message', on);
      child.send('cpu');
    });
  const run = (port: number, route: string, seconds: number) =>
    autocannon({ url: `http://127.0.0.1:${port}/${route}`, headers: { 'fencing-token': TOKEN }, connections, duration: seconds });

  const loadBefore = loadavg().map((l) => l.toFixed(2)).join(' ');
  const samples = new Map(targets.map((t) => [t.name, [] as { rps: number; cpu: number; user: number; p99: number }[]]));
  // BENCH_COPIES servers per framework, each with its routes added in
  // another order (rotated by an equal step), all started and warmed up
  // first, kept for the whole run, and taking the rounds in turn: Express's
  // router tries routes in the order they were added (a route pays about
  // 1 µs per request for each route before it), and two processes serving
  // the same route differ by a few µs per request (their code compiled and
  // laid out differently); so every route shares the places and the copies
  // alike. (Fresh servers each round instead measured code still warming
  // up: Hono's guarded route 5-8 µs slower than in a process that had
  // served it for longer.)
  const copies = Math.max(1, Number(process.env.BENCH_COPIES ?? 4));
  const step = Math.max(1, Math.floor(routes.length / copies));
  const fleets: Map<Framework, { child: ChildProcess; port: number }>[] = [];
  for (let copy = 0; copy < copies; copy++) {
    const order = routes.map((_, i) => routes[(i + copy * step) % routes.length]!);
    const servers = await start(order);
    for (const t of targets) await run(servers.get(t.framework)!.port, t.route, 2); // warm up
    fleets.push(servers);
  }
  for (let round = 0; round < rounds; round++) {
    const servers = fleets[round % copies]!;
    for (const t of round % 2 === 0 ? targets : [...targets].reverse()) {
      const { child, port } = servers.get(t.framework)!;
      const before = await cpu(child);
      const result = await run(port, t.route, duration);
      const after = await cpu(child);
      if (result.non2xx !== 0 || result.errors !== 0) throw new Error(`${t.name}: ${result.non2xx} non-2xx, ${result.errors} errors`);
      const n = result.requests.total;
      samples.get(t.name)!.push({ rps: result.requests.average, p99: result.latency.p99, cpu: (after.cpu - before.cpu) / n, user: (after.user - before.user) / n });
    }
  }
  for (const servers of fleets) for (const { child } of servers.values()) child.disconnect();
  const quantile = (values: number[], q: number): number => {
    const sorted = [...values].sort((x, y) => x - y);
    const at = (sorted.length - 1) * q;
    const lo = Math.floor(at);
    return sorted[lo]! + (sorted[Math.min(lo + 1, sorted.length - 1)]! - sorted[lo]!) * (at - lo);
  };
  const median = (values: number[]): number => quantile(values, 0.5);
  const iqr = (values: number[], digits: number): string => `${quantile(values, 0.25).toFixed(digits)}..${quantile(values, 0.75).toFixed(digits)}`;
  console.log(`node ${process.version}, ${connections} connections, ${rounds} rounds of ${duration} s per route (${copies} servers per framework with the routes added in rotated orders, one per round in turn; order reversed every other round), medians over rounds [IQR]`);
  console.log(`${cpus().length} CPUs, load average ${loadBefore} (before), ${loadavg().map((l) => l.toFixed(2)).join(' ')} (after)`);
  if (routes.includes('baseline')) console.log(`baseline: ${process.env.FK_BASELINE}/dist (guarded = this checkout's dist)`);
  console.log(`${'route'.padEnd(18)}   req/s  p99 ms  req/s vs bare [IQR]       server CPU µs/req [IQR]   CPU vs bare  user µs/req`);
  for (const t of targets) {
    const s = samples.get(t.name)!;
    // The -json routes against the bare route answering the same body.
    const bare = samples.get(`${t.framework} ${t.route.endsWith('-json') ? 'bare-json' : 'bare'}`)!;
    const pick = (k: 'rps' | 'cpu' | 'user' | 'p99'): number => median(s.map((x) => x[k]));
    const ratios = (k: 'rps' | 'cpu'): number[] => s.map((x, i) => x[k] / bare[i]![k]);
    const cpuAll = s.map((x) => x.cpu);
    console.log(
      `${t.name.padEnd(18)} ${pick('rps').toFixed(0).padStart(7)} ${String(pick('p99')).padStart(7)}  ${median(ratios('rps')).toFixed(3).padStart(6)} [${iqr(ratios('rps'), 3)}]  ${pick('cpu').toFixed(1).padStart(7)} [${iqr(cpuAll, 1)}]  ${median(ratios('cpu')).toFixed(3).padStart(11)}  ${pick('user').toFixed(1).padStart(11)}`,
    );
  }
  // The gap to bare, split three ways (CPU per request): what the framework
  // charges for any guard of the guard's kind (noop: the least middleware or
  // hook, handing its handler a context the framework's way and doing nothing
  // else), what the store's promise API costs a route that
  // does the least by hand (bound: the header, the parse, a MemoryFenceStore
  // admit and commit, awaited), and what fencing() costs over the noop (its
  // own work: the context, nesting, maxHoldMs, release on the response's end
  // or the client leaving, the admission).
  console.log('');
  console.log('where the gap goes: ratios are medians of per-round ratios (req/s); CPU µs/req medians');
  console.log(`${'framework'.padEnd(10)} ${'guarded/bare'.padStart(12)} ${'noop/bare'.padStart(10)} ${'bound/bare'.padStart(11)} ${'guarded/noop'.padStart(13)}   ${'CPU bare'.padStart(8)} ${'noop'.padStart(7)} ${'bound'.padStart(7)} ${'guarded'.padStart(8)}   framework's (noop-bare)  guard's own (guarded-noop)  of which user`);
  for (const framework of FRAMEWORKS) {
    const of = (route: string) => samples.get(`${framework} ${route}`)!;
    const ratio = (a: string, b: string): number => median(of(a).map((x, i) => x.rps / of(b)[i]!.rps));
    const cpuOf = (route: string): number => median(of(route).map((x) => x.cpu));
    const userOf = (route: string): number => median(of(route).map((x) => x.user));
    const [bare, noop, bound, guarded] = [cpuOf('bare'), cpuOf('noop'), cpuOf('bound'), cpuOf('guarded')];
    const us = (v: number): string => `${v.toFixed(1).padStart(6)} µs`;
    console.log(
      `${framework.padEnd(10)} ${ratio('guarded', 'bare').toFixed(3).padStart(12)} ${ratio('noop', 'bare').toFixed(3).padStart(10)} ${ratio('bound', 'bare').toFixed(3).padStart(11)} ${ratio('guarded', 'noop').toFixed(3).padStart(13)}   ${bare.toFixed(1).padStart(8)} ${noop.toFixed(1).padStart(7)} ${bound.toFixed(1).padStart(7)} ${guarded.toFixed(1).padStart(8)}   ${us(noop - bare).padEnd(23)}  ${us(guarded - noop).padEnd(26)}  ${us(userOf('guarded') - userOf('noop'))}`,
    );
  }
  console.log('');
  console.log('with a small JSON body (the -json routes): guarded vs bare answering the same body');
  console.log(`${'framework'.padEnd(10)} ${'guarded/bare'.padStart(12)}   ${'CPU bare'.padStart(8)} ${'guarded'.padStart(8)}   guard's (guarded-bare)  of which user`);
  for (const framework of FRAMEWORKS) {
    const of = (route: string) => samples.get(`${framework} ${route}`)!;
    const ratio = median(of('guarded-json').map((x, i) => x.rps / of('bare-json')[i]!.rps));
    const [bare, guarded] = [median(of('bare-json').map((x) => x.cpu)), median(of('guarded-json').map((x) => x.cpu))];
    const user = median(of('guarded-json').map((x) => x.user)) - median(of('bare-json').map((x) => x.user));
    console.log(`${framework.padEnd(10)} ${ratio.toFixed(3).padStart(12)}   ${bare.toFixed(1).padStart(8)} ${guarded.toFixed(1).padStart(8)}   ${(guarded - bare).toFixed(1).padStart(6)} µs               ${user.toFixed(1).padStart(6)} µs`);
  }
  const chart = process.env.BENCH_CHART ?? fileURLToPath(new URL('../../docs/images/bench/http-guards.svg', import.meta.url));
  if (chart !== '') {
    // The same medians as the table: one group per framework, bare beside guarded.
    const points: BarPoint[] = targets.map((t) => ({ group: t.framework, series: SERIES[t.route] ?? t.route, value: Math.round(median(samples.get(t.name)!.map((x) => x.rps))) }));
    const written = await writeSvg(
      chart,
      barChartSpec(points, {
        title: 'HTTP guards: the bare route vs fencing() with MemoryFenceStore',
        subtitle: [
          `test/bench/http-guards.ts: ${connections} connections, medians of ${rounds} x ${duration} s`,
          `by hand: bare + the token parsed + MemoryFenceStore admit/commit${routes.includes('baseline') ? '; baseline: FK_BASELINE\'s build' : ''}`,
          `${await machineLine()} at the end`,
        ],
        yTitle: 'requests/s (median of rounds)',
        width: 560,
        height: 280,
        seriesOrder: Object.values(SERIES),
      }),
    );
    console.log(`chart: ${written}`);
  }
}

/** Pin every thread of process `pid` to core `cpu` (util-linux's taskset). */
function pin(pid: number, cpu: number): void {
  execFileSync('taskset', ['--all-tasks', '--pid', '--cpu-list', String(cpu), String(pid)], { stdio: 'ignore' });
}
