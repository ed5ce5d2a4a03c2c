/**
 * The demo's HTTP resource: a tiny Express service whose PUT sits behind the
 * fencing() middleware, its fence kept in PostgreSQL. The CLI is the top
 * layer, so the demo may load the adapters; it loads them (and their peer
 * libraries) only when it runs.
 */
import { once } from 'node:events';
import { createServer } from 'node:http';

export interface DemoService {
  readonly url: string;
  close(): Promise<void>;
}

export async function startService(databaseUrl: string, resource: string, unfenced: boolean): Promise<DemoService> {
  const [{ default: express }, { default: pg }, { fencing }, { PostgresFenceStore }] = await Promise.all([
    import('express'),
    import('pg'),
    import('../../../adapters/express/index.js'),
    import('../../../adapters/postgres/index.js'),
  ]);
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 4 });
  const state: { body: string | null; token: string | null } = { body: null, token: null };
  const app = express();
  const guard = unfenced ? [] : [fencing({ store: new PostgresFenceStore(pool), resource })];
  app.put('/reports/reindex', ...guard, express.text(), (req, res) => {
    state.body = typeof req.body === 'string' ? req.body : null;
    state.token = req.fencing ? req.fencing.token.toString() : (req.get('fencing-token') ?? null);
    res.status(204).end();
  });
  app.get('/reports/reindex', (_req, res) => {
    res.json(state);
  });
  const server = createServer(app);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('service did not listen');
  return {
    url: `http://127.0.0.1:${address.port}/reports/reindex`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await pool.end();
    },
  };
}
