// Benchmark: what the HTTP guards cost on the hot path, per framework: for
// Express 5, Fastify 5, Hono (over @hono/node-server) and the Fetch guard (a
// plain Fetch handler over @hono/node-server), the server's CPU per request
// of a route behind fencing() with MemoryFenceStore (one resource, one token:
// every request admitted and committed) against the same framework's bare
// route. The routes per framework:
//   bare / bare-json: the route answering nothing, or a small JSON body the
//     framework's usual way (res.json, a returned object, c.json, a Response
//     of a string);
//   noop / noop-json: the same behind the least middleware or hook of the
//     guard's kind, handing its handler a context the framework's way
//     (req.fencing, a decorated request property, c.set, a second argument)
//     and nothing else: the framework's own price of any such guard, so the
//     gap to bare splits into the framework's share and the guard's own;
//   bound: the bare handler doing by hand, with the store's public promise
//     API, the least a guard must do (the header, the token parsed, admit,
//     answer, commit): a reference;
//   guarded / guarded-json: behind fencing().
// Not in the suite: a script that prints figures, nothing here asserts on time.
//
//   npm run build && node node_modules/vite-node/vite-node.mjs test/bench/http-guards.ts
//
// BENCH_DURATION (s per measurement, default 2), BENCH_ROUNDS (default 8),
// BENCH_CONNECTIONS (per server, default 32), BENCH_WARM_UP (s a pair is
// loaded first, default 6), BENCH_COPIES (pairs of processes per pair,
// default 4), BENCH_FRAMEWORKS and
// BENCH_ROUTES (comma lists, for a focused run). FK_BASELINE=<a checkout
// with dist/> adds, per framework, "baseline" routes guarded by that build
// (e.g. main's, built in a scratch directory), each measured against this
// build's: a change's before and after. BENCH_CPU_PROF=<dir>: every server
// writes a V8 CPU profile there.
//
// How, and why (each measured on the 2-core VM this was written on):
// - Pairs measured at the same time. Each route is measured together with
//   the one it is compared to (its bare route; and fencing() with the no-op),
//   both servers loaded at once on the same core, each by its own
//   autocannon, and the figure is the ratio of their CPU per request in that
//   window. Routes measured one after the other, even seconds apart, saw
//   different machines: the CPU per request of one route moved by 10-40%
//   between rounds (a shared host), which drowned a guard's few µs (the same
//   route measured 0.66x and 0.82x of bare in two runs). At the same time both
//   see the same machine: the per-round ratios of one pair of processes
//   then spread by about ±1%. A control pair, processes serving the same bare route,
//   shows the floor.
// - Processes of their own for every pair, four pairs of them (BENCH_COPIES)
//   taking the rounds in turn, each pair warmed up together, started in
//   turn first-route-first and second-route-first: of two processes serving
//   different routes, the one started first measured about 2% dearer
//   (guarded vs no-op Hono JSON, one pair at a time, four runs each way:
//   0.90-0.94x started no-op first, 0.86-0.88x started guarded first), and
//   two processes
//   serving the same route differ by up to about 6% in CPU per request (the
//   control pair of a run with one process per route: 0.95x to 1.06x), and
//   a process's CPU per request keeps falling for as long as it serves, so
//   a process shared by several pairs (more requests) is cheaper than its
//   partners (the bare route's, shared: its control partner 0.89x-0.95x).
// - Each process serves one route only (http-guards-server.mjs:
//   plain node on the built package, dist/, as an application runs it; not
//   vite-node, which would transform dist/'s modules and charge every call
//   between them to the guards): no route pays for others before it in a
//   router (Express tries routes in the order they were added: about 1 µs
//   per earlier route), and no guard sees another framework's objects.
// - The servers on one core and the load generator (this process) on the
//   other. Sharing a core, the two servers of a pair switch back and forth:
//   each request costs a few µs more than with the core to itself, the same
//   for both, so the ratio understates a gap slightly (the -json routes'
//   bare CPU per request is printed beside it).
// - The figure is CPU time per request of the server process
//   (process.cpuUsage: user + system; the user column alone is its
//   JavaScript and native code). A saturated server's throughput is the
//   inverse, so "x" reads as throughput relative to bare.
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { barChartSpec, machineLine, writeSvg, type BarPoint } from './lib/chart.js';

const TOKEN = '34';
/** Seconds each pair of processes is loaded together before the rounds (BENCH_WARM_UP). */
const WARM_UP_S = Number(process.env.BENCH_WARM_UP ?? 6);
/** The chart's name of each route drawn (every one but the bare routes, the 1.0x they are compared with). */
const SERIES: Record<string, string> = {
  noop: 'no-op middleware',
  bound: 'by hand',
  guarded: 'fencing()',
  baseline: 'before (FK_BASELINE)',
  'noop-json': 'no-op, JSON body',
  'guarded-json': 'fencing(), JSON body',
  'baseline-json': 'before, JSON body',
};
/** The cores of a pinned run (BENCH_PIN): the load generator's, the servers'. */
const LOAD_CPU = 0;
const SERVER_CPU = 1;
const FRAMEWORKS = ['express', 'fastify', 'hono', 'fetch'] as const;
type Framework = (typeof FRAMEWORKS)[number];

await measure();

/** The routes of a run: `baseline` ones when FK_BASELINE names a build. */
function routesOf(baseline: boolean): string[] {
  const builds = baseline ? ['guarded', 'baseline'] : ['guarded'];
  return ['bare', 'noop', 'bound', ...builds, 'bare-json', 'noop-json', ...builds.map((route) => `${route}-json`)];
}

async function measure(): Promise<void> {
  // autocannon ships no types: the little used here, typed by hand.
  type Result = { non2xx: number; errors: number; requests: { average: number; total: number } };
  const { default: autocannon } = (await import('autocannon' as string)) as { default: (options: object) => Promise<Result> };
  const duration = Number(process.env.BENCH_DURATION ?? 2);
  const rounds = Number(process.env.BENCH_ROUNDS ?? 8);
  const connections = Number(process.env.BENCH_CONNECTIONS ?? 32);
  const serverScript = fileURLToPath(new URL('./http-guards-server.mjs', import.meta.url));
  const profile = process.env.BENCH_CPU_PROF;
  const execArgv = profile === undefined || profile === '' ? [] : ['--cpu-prof', `--cpu-prof-dir=${profile}`];
  const pinned = process.env.BENCH_PIN !== '0' && cpus().length >= 2;
  if (pinned) pin(process.pid, LOAD_CPU);
  const baseline = process.env.FK_BASELINE !== undefined && process.env.FK_BASELINE !== '';
  const allRoutes = routesOf(baseline);
  const chosen = only(allRoutes, process.env.BENCH_ROUTES);
  const frameworks = only(FRAMEWORKS, process.env.BENCH_FRAMEWORKS);
  const pairs = pairsOf(allRoutes, chosen);
  // BENCH_COPIES pairs of processes per pair, taking the rounds in turn.
  const copies = Math.max(1, Number(process.env.BENCH_COPIES ?? 4));

  type Server = { child: ChildProcess; port: number; route: string };
  const start = async (framework: Framework, name: string): Promise<Server> => {
    const route = name.replace(/~\d$/, '');
    const child: ChildProcess = fork(serverScript, [framework, route], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv });
    const started = await new Promise<{ port: number }>((resolve, reject) => {
      child.once('message', (m) => resolve(m as { port: number }));
      child.once('exit', (code) => reject(new Error(`the ${framework} ${name} server exited (${code})`)));
    });
    if (pinned) pin(child.pid!, SERVER_CPU);
    return { child, port: started.port, route };
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
  const load = (server: Server, seconds: number) =>
    autocannon({ url: `http://127.0.0.1:${server.port}/${server.route}`, headers: { 'fencing-token': TOKEN }, connections, duration: seconds });
  /** Load both at once for `seconds`; each one's CPU (user + system, and user) per request, and its req/s. */
  const together = async (a: Server, b: Server, seconds: number) => {
    const [a0, b0] = await Promise.all([cpu(a.child), cpu(b.child)]);
    const [ra, rb] = await Promise.all([load(a, seconds), load(b, seconds)]);
    const [a1, b1] = await Promise.all([cpu(a.child), cpu(b.child)]);
    for (const r of [ra, rb]) if (r.non2xx !== 0 || r.errors !== 0) throw new Error(`${a.route} / ${b.route}: ${r.non2xx} non-2xx, ${r.errors} errors`);
    const per = (x0: { cpu: number; user: number }, x1: { cpu: number; user: number }, r: Result) => ({ cpu: (x1.cpu - x0.cpu) / r.requests.total, user: (x1.user - x0.user) / r.requests.total, rps: r.requests.average });
    return [per(a0, a1, ra), per(b0, b1, rb)] as const;
  };

  const loadBefore = loadavg().map((l) => l.toFixed(2)).join(' ');
  type Sample = { cpu: number; user: number; rps: number };
  /** Per framework and pair: the per-round samples of a and of b. */
  const results = new Map<string, { a: Sample[]; b: Sample[] }>();
  for (const framework of frameworks) {
    // One framework's servers at a time: a pair's two are the only ones loaded.
    // Processes of their own for every pair (a process in several pairs
    // would serve more requests than its partners, and a process's CPU per
    // request keeps falling for as long as it serves: the bare route, in
    // every pair, measured its control partner 0.89x-0.95x), each pair's
    // two warmed up together, as they are measured.
    const servers = new Map<string, readonly [Server, Server]>();
    for (const p of pairs) {
      for (let copy = 0; copy < copies; copy++) {
        // Every other copy is started second route first (the one started first measures dearer).
        let both: readonly [Server, Server];
        if (copy % 2 === 0) both = [await start(framework, p.a), await start(framework, p.b)];
        else {
          const b = await start(framework, p.b);
          both = [await start(framework, p.a), b];
        }
        await together(both[0], both[1], WARM_UP_S);
        servers.set(`${p.a} ${p.b}#${copy}`, both);
      }
    }
    for (const p of pairs) results.set(`${framework} ${p.a} ${p.b}`, { a: [], b: [] });
    for (let round = 0; round < rounds; round++) {
      for (const p of round % 2 === 0 ? pairs : [...pairs].reverse()) {
        const [a, b] = servers.get(`${p.a} ${p.b}#${round % copies}`)!;
        const [sa, sb] = await together(a, b, duration);
        const r = results.get(`${framework} ${p.a} ${p.b}`)!;
        r.a.push(sa);
        r.b.push(sb);
      }
    }
    for (const both of servers.values()) for (const { child } of both) child.disconnect();
  }

  const quantile = (values: number[], q: number): number => {
    const sorted = [...values].sort((x, y) => x - y);
    const at = (sorted.length - 1) * q;
    const lo = Math.floor(at);
    return sorted[lo]! + (sorted[Math.min(lo + 1, sorted.length - 1)]! - sorted[lo]!) * (at - lo);
  };
  const median = (values: number[]): number => quantile(values, 0.5);
  /** b against a, round by round: a's CPU per request over b's (above 1: b is cheaper). */
  const ratios = (r: { a: Sample[]; b: Sample[] }, k: 'cpu' | 'user'): number[] => r.a.map((x, i) => x[k] / r.b[i]![k]);
  const x = (values: number[]): string => `${median(values).toFixed(3)}x [${quantile(values, 0.25).toFixed(3)}..${quantile(values, 0.75).toFixed(3)}]`;
  console.log(`node ${process.version}, ${rounds} rounds of ${duration} s per pair, both servers of a pair loaded at once (${connections} connections each) on one core, autocannon on the other; ${copies} pairs of processes per pair, started in turn first route first and second route first, taking the rounds in turn`);
  console.log(`${cpus().length} CPUs, load average ${loadBefore} (before), ${loadavg().map((l) => l.toFixed(2)).join(' ')} (after)`);
  if (baseline) console.log(`baseline: ${process.env.FK_BASELINE}/dist (guarded = this checkout's dist)`);
  console.log('"x": the first route\'s CPU per request over the second\'s, median of the per-round ratios [IQR] (throughput of the second relative to the first)');
  console.log(`${'pair'.padEnd(36)} ${'CPU x [IQR]'.padEnd(28)} ${'user x'.padStart(7)}   CPU µs/req (first / second)   req/s (first / second)`);
  const points: BarPoint[] = [];
  for (const framework of frameworks) {
    for (const p of pairs) {
      const r = results.get(`${framework} ${p.a} ${p.b}`)!;
      const cpuX = ratios(r, 'cpu');
      const us = (s: Sample[]): string => median(s.map((v) => v.cpu)).toFixed(1);
      const rps = (s: Sample[]): string => median(s.map((v) => v.rps)).toFixed(0);
      console.log(`${`${framework} ${p.b} vs ${p.a}`.padEnd(36)} ${x(cpuX).padEnd(28)} ${median(ratios(r, 'user')).toFixed(3).padStart(7)}   ${`${us(r.a)} / ${us(r.b)}`.padEnd(28)}  ${rps(r.a)} / ${rps(r.b)}`);
      if (p.chart !== undefined) points.push({ group: framework, series: p.chart, value: Number(median(cpuX).toFixed(3)) });
    }
  }
  const chart = process.env.BENCH_CHART ?? fileURLToPath(new URL('../../docs/images/bench/http-guards.svg', import.meta.url));
  if (chart !== '' && points.length > 0) {
    const written = await writeSvg(
      chart,
      barChartSpec(points, {
        title: 'HTTP guards: throughput relative to the bare route (CPU per request)',
        subtitle: [
          `test/bench/http-guards.ts: medians of ${rounds} rounds of ${duration} s, each route loaded at the same time as its bare route`,
          'MemoryFenceStore; no-op: the least middleware or hook of the guard\'s kind; the line: 0.9x',
          `${await machineLine()} at the end`,
        ],
        yTitle: 'bare CPU per request / route CPU per request',
        width: 560,
        height: 280,
        rule: { value: 0.9, label: '0.9x' },
        seriesOrder: [...new Set(points.map((point) => point.series))],
      }),
    );
    console.log(`chart: ${written}`);
  }
}

/**
 * What is measured together: every chosen route against the bare route
 * answering the same body, fencing() against the no-op as well (the guard's
 * own share), the baseline build against this one, and the control: the
 * bare JSON route against a second process serving it ("bare-json~2").
 * `chart`: the series a pair is drawn as, if it is drawn.
 */
function pairsOf(all: readonly string[], chosen: readonly string[]): { a: string; b: string; chart?: string | undefined }[] {
  const pairs: { a: string; b: string; chart?: string | undefined }[] = [];
  const has = (route: string): boolean => chosen.includes(route);
  for (const route of all) {
    if (!has(route) || route === 'bare' || route === 'bare-json') continue;
    const bare = route.endsWith('-json') ? 'bare-json' : 'bare';
    pairs.push({ a: bare, b: route, chart: SERIES[route] });
  }
  for (const suffix of ['', '-json']) {
    if (has(`noop${suffix}`) && has(`guarded${suffix}`)) pairs.push({ a: `noop${suffix}`, b: `guarded${suffix}` });
    if (has(`guarded${suffix}`) && has(`baseline${suffix}`)) pairs.push({ a: `baseline${suffix}`, b: `guarded${suffix}` });
  }
  if (chosen.some((route) => route.endsWith('-json'))) pairs.push({ a: 'bare-json', b: 'bare-json~2' });
  return pairs;
}

/** The names of `all` that `list` (a comma list; all when unset or empty) names; an unknown name is an error. */
function only<T extends string>(all: readonly T[], list: string | undefined): T[] {
  if (list === undefined || list.trim() === '') return [...all];
  const names = list.split(',').map((name) => name.trim());
  for (const name of names) if (!all.includes(name as T)) throw new Error(`unknown name ${name}: one of ${all.join(', ')}`);
  return all.filter((name) => names.includes(name));
}

/** Pin every thread of process `pid` to core `cpu` (util-linux's taskset). */
function pin(pid: number, cpu: number): void {
  execFileSync('taskset', ['--all-tasks', '--pid', '--cpu-list', String(cpu), String(pid)], { stdio: 'ignore' });
}
