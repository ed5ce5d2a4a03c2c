// The servers of test/bench/http-guards.ts: one framework's routes in one
// process, run by plain node on the built package (dist/), as an
// application runs it. (Not under vite-node, as the measuring script is:
// vite-node would transform dist/'s modules, and every call between them
// would go through its module objects, a cost no application pays, while
// the frameworks, in node_modules, run untransformed.)
//
//   node test/bench/http-guards-server.mjs <framework> <route,route,...>
//
// Adds the named routes (http-guards.ts's routesOf(), in the given order) to
// one app of <framework> (express, fastify, hono, fetch), listens on
// 127.0.0.1, sends { port } to its parent over IPC, answers 'cpu' with its
// CPU time ({ cpu: user + system, user }, µs), and exits when the parent
// disconnects; run by hand, it prints where it listens instead.
// FK_BASELINE=<a checkout with dist/> adds the baseline routes.
import { pathToFileURL } from 'node:url';

/** What the -json routes answer. */
const JSON_BODY = Object.freeze({ ok: true, id: 34 });
/** What the no-op routes hand their handler, as a guard hands its fencing context. */
const CONTEXT = Object.freeze({ resource: 'bench' });

/** The guards of one build (a dist/ directory's adapters), by framework. */
async function guardsOf(dist) {
  return {
    express: await import(`${dist}express/index.js`),
    fastify: await import(`${dist}fastify/index.js`),
    hono: await import(`${dist}hono/index.js`),
    fetch: await import(`${dist}fetch/index.js`),
  };
}

/** Serve the routes of `order` (routesOf()'s, rotated) under `framework`, added in that order, and report the port. */
async function serve(framework, order) {
  const builds = [['guarded', await guardsOf(new URL('../../dist/adapters/', import.meta.url).href)]];
  const { parseFencing } = await import(new URL('../../dist/src/index.js', import.meta.url).href);
  const { MemoryFenceStore } = builds[0][1].fetch;
  // The bound routes: one store per framework, the same resource and token as the guards'.
  const boundStore = { express: new MemoryFenceStore(), fastify: new MemoryFenceStore(), hono: new MemoryFenceStore(), fetch: new MemoryFenceStore() };
  const tokenOf = (req) => parseFencing(req.headers['fencing-token']);
  const baseline = process.env.FK_BASELINE;
  if (baseline !== undefined && baseline !== '') builds.push(['baseline', await guardsOf(pathToFileURL(`${baseline}/dist/adapters/`).href)]);
  const { default: express } = await import('express');
  const { default: Fastify } = await import('fastify');
  const { Hono } = await import('hono');
  const { serve: honoServe } = await import('@hono/node-server');
  const port = (server) => server.address().port;
  /** How each route is added to the framework's one app; called in `order`. */
  let adders = {};
  let listen = () => Promise.reject(new Error(`unknown framework ${framework}`));
  if (framework === 'express') {
    const e = express();
    e.disable('x-powered-by');
    e.disable('etag');
    adders = {
      bare: () => e.get('/bare', (_req, res) => void res.end()),
      // The least middleware that hands its handler a context on req, as fencing() does (req.fencing):
      // Express's own price of any such guard. (Express gives every request object a hidden class
      // of its own, so a property added to req is a new one each request: that is Express's, not the guard's.)
      noop: () => e.get('/noop', (req, _res, next) => { req.fencing = CONTEXT; next(); }, (_req, res) => void res.end()),
      bound: () => e.get('/bound', (req, res) => {
        void boundStore.express.admit('bench', tokenOf(req)).then((admission) => {
          res.end();
          void admission.commit();
        });
      }),
      'bare-json': () => e.get('/bare-json', (_req, res) => void res.json(JSON_BODY)),
      'noop-json': () => e.get('/noop-json', (req, _res, next) => { req.fencing = CONTEXT; next(); }, (_req, res) => void res.json(JSON_BODY)),
    };
    for (const [route, g] of builds) {
      adders[route] = () => e.get(`/${route}`, g.express.fencing({ store: new g.express.MemoryFenceStore(), resource: 'bench' }), (_req, res) => void res.end());
      adders[`${route}-json`] = () => e.get(`/${route}-json`, g.express.fencing({ store: new g.express.MemoryFenceStore(), resource: 'bench' }), (_req, res) => void res.json(JSON_BODY));
    }
    listen = () => new Promise((resolve) => {
      const server = e.listen(0, '127.0.0.1', () => resolve(port(server)));
    });
  }
  if (framework === 'fastify') {
    const f = Fastify();
    adders = {
      bare: () => f.get('/bare', async (_request, reply) => reply.send()),
      // The least preHandler hook (a callback one, as fencing's) handing a context on a decorated
      // request property (as request.fencing): Fastify's own price of any guard that is a hook.
      noop: () => f.register(async (scope) => {
        scope.decorateRequest('benchContext', undefined);
        scope.addHook('preHandler', (request, _reply, done) => {
          request.benchContext = CONTEXT;
          done();
        });
        scope.get('/noop', async (_request, reply) => reply.send());
      }),
      bound: () => f.get('/bound', async (request, reply) => {
        const admission = await boundStore.fastify.admit('bench', tokenOf(request));
        void admission.commit();
        return reply.send();
      }),
      'bare-json': () => f.get('/bare-json', async () => JSON_BODY),
      'noop-json': () => f.register(async (scope) => {
        scope.decorateRequest('benchContext', undefined);
        scope.addHook('preHandler', (request, _reply, done) => {
          request.benchContext = CONTEXT;
          done();
        });
        scope.get('/noop-json', async () => JSON_BODY);
      }),
    };
    for (const [route, g] of builds) {
      adders[route] = () => f.register(async (scope) => {
        await scope.register(g.fastify.fencing, { store: new g.fastify.MemoryFenceStore(), resource: 'bench' });
        scope.get(`/${route}`, async (_request, reply) => reply.send());
      });
      adders[`${route}-json`] = () => f.register(async (scope) => {
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
      // The least middleware handing a context through c.set (as c.get('fencing')): Hono's own price of
      // any guard that is a middleware. Not async, as fencing() is not (the async form, `await next()`,
      // measured 1.05x the CPU per request of `(c, next) => next()`, loaded together).
      noop: () => h.get('/noop', (c, next) => { c.set('fencing', CONTEXT); return next(); }, (c) => c.body(null)),
      // Node's headers (c.env.incoming), as the guard reads Node's rawHeaders: c.req.header() would build a Headers.
      bound: () => h.get('/bound', async (c) => {
        const admission = await boundStore.hono.admit('bench', tokenOf(c.env.incoming));
        void admission.commit();
        return c.body(null);
      }),
      'bare-json': () => h.get('/bare-json', (c) => c.json(JSON_BODY)),
      'noop-json': () => h.get('/noop-json', (c, next) => { c.set('fencing', CONTEXT); return next(); }, (c) => c.json(JSON_BODY)),
    };
    for (const [route, g] of builds) {
      adders[route] = () => h.get(`/${route}`, g.hono.fencing({ store: new g.hono.MemoryFenceStore(), resource: 'bench' }), (c) => c.body(null));
      adders[`${route}-json`] = () => h.get(`/${route}-json`, g.hono.fencing({ store: new g.hono.MemoryFenceStore(), resource: 'bench' }), (c) => c.json(JSON_BODY));
    }
    listen = () => new Promise((resolve) => {
      honoServe({ fetch: h.fetch, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
  }
  if (framework === 'fetch') {
    // A Map from path to handler: the same steps for every route, wherever it was added. The bare route is the miss.
    const fetchRoutes = new Map();
    // As Hono's c.json makes it (Response.json would make undici's own, not node-server's lightweight one).
    const json = () => new Response(JSON.stringify(JSON_BODY), { headers: { 'content-type': 'application/json' } });
    // The least wrapper that waits for the handler, handing it a context (as withFencing's second argument).
    const contextHandler = (_request, context) => (context === CONTEXT ? new Response(null) : new Response(null, { status: 500 }));
    const jsonContextHandler = (_request, context) => (context === CONTEXT ? json() : new Response(null, { status: 500 }));
    adders = {
      bare: () => undefined,
      noop: () => fetchRoutes.set('/noop', async (request) => await contextHandler(request, CONTEXT)),
      bound: () => fetchRoutes.set('/bound', (_request, env) => boundStore.fetch.admit('bench', tokenOf(env.incoming)).then((admission) => {
        void admission.commit();
        return new Response(null);
      })),
      'bare-json': () => fetchRoutes.set('/bare-json', () => Promise.resolve(json())),
      'noop-json': () => fetchRoutes.set('/noop-json', async (request) => await jsonContextHandler(request, CONTEXT)),
    };
    for (const [route, g] of builds) {
      adders[route] = () => fetchRoutes.set(`/${route}`, g.fetch.withFencing({ store: new g.fetch.MemoryFenceStore(), resource: 'bench' }, () => new Response(null)));
      adders[`${route}-json`] = () => fetchRoutes.set(`/${route}-json`, g.fetch.withFencing({ store: new g.fetch.MemoryFenceStore(), resource: 'bench' }, json));
    }
    // The server's second argument passed on, as serve({ fetch: guarded }) would.
    const plain = (request, env) => {
      const guarded = fetchRoutes.get(new URL(request.url).pathname);
      return guarded === undefined ? new Response(null) : guarded(request, env);
    };
    listen = () => new Promise((resolve) => {
      honoServe({ fetch: plain, port: 0, hostname: '127.0.0.1' }, (info) => resolve(info.port));
    });
  }
  for (const route of order) await adders[route]();
  const served = await listen();
  if (process.send === undefined) {
    // Run by hand (to profile it, say): where it listens, until it is interrupted.
    console.log(`${framework}: http://127.0.0.1:${served}/ serving ${order.join(', ')}`);
    return;
  }
  process.send({ port: served });
  process.on('message', (message) => {
    if (message === 'cpu') {
      const { user, system } = process.cpuUsage();
      process.send({ cpu: user + system, user });
    }
  });
  process.on('disconnect', () => process.exit(0));
}

await serve(process.argv[2], process.argv[3].split(','));
