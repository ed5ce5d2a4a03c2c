/**
 * The demo's three resources, each written the fenced way (or, to show what
 * fencing prevents, DEMO_UNFENCED=1: the same writes without the token check):
 *   postgres  a row of a demo table, via fencedUpsert (WHERE fencing_token <= n)
 *   s3        an object, via fencedPutObject (conditional PUT, token in metadata)
 *   http      a service endpoint behind the fencing() middleware (409 when stale)
 * The peer libraries are loaded here, only when the demo runs.
 */
import { StaleTokenError, formatToken, type FencingToken } from '../../index.js';

export interface WriteOutcome {
  readonly outcome: 'accepted' | 'refused' | 'error';
  readonly detail: string;
}

export interface DemoWriter {
  readonly name: 'postgres' | 's3' | 'http';
  write(body: string, token: FencingToken): Promise<WriteOutcome>;
}

export interface DemoResources {
  readonly writers: readonly DemoWriter[];
  /** What each resource holds now: its body and the token it carries. */
  read(): Promise<Record<DemoWriter['name'], { body: string | null; token: string | null }>>;
  close(): Promise<void>;
}

export interface DemoSettings {
  readonly DATABASE_URL?: string | undefined;
  readonly S3_ENDPOINT?: string | undefined;
  readonly S3_REGION?: string | undefined;
  readonly S3_ACCESS_KEY?: string | undefined;
  readonly S3_SECRET_KEY?: string | undefined;
  readonly DEMO_TABLE?: string | undefined;
  readonly DEMO_BUCKET?: string | undefined;
  readonly DEMO_KEY?: string | undefined;
  readonly DEMO_URL?: string | undefined;
  readonly DEMO_UNFENCED?: string | undefined;
}

function stale(error: unknown): WriteOutcome | null {
  if (error instanceof StaleTokenError) {
    return { outcome: 'refused', detail: `StaleTokenError: current token ${error.current ?? '?'}` };
  }
  return null;
}

function failed(error: unknown): WriteOutcome {
  return stale(error) ?? { outcome: 'error', detail: (error as Error)?.message ?? String(error) };
}

export async function openDemoResources(env: DemoSettings): Promise<DemoResources> {
  const unfenced = env.DEMO_UNFENCED === '1';
  const table = env.DEMO_TABLE ?? 'fencekeeper_demo';
  const bucket = env.DEMO_BUCKET ?? 'fencekeeper-demo';
  const key = env.DEMO_KEY ?? 'reindex/state.txt';
  const url = env.DEMO_URL;
  if (url === undefined) throw new Error('DEMO_URL is not set');

  const [{ default: pg }, s3sdk, postgres, s3] = await Promise.all([
    import('pg'),
    import('@aws-sdk/client-s3'),
    import('../../../adapters/postgres/index.js'),
    import('../../../adapters/s3/index.js'),
  ]);
  const pool = new pg.Pool({ connectionString: env.DATABASE_URL ?? 'postgres://root@127.0.0.1:5432/test', max: 2 });
  const client = new s3sdk.S3Client({
    endpoint: env.S3_ENDPOINT ?? 'http://127.0.0.1:7480',
    region: env.S3_REGION ?? 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: env.S3_ACCESS_KEY ?? 'test', secretAccessKey: env.S3_SECRET_KEY ?? 'testsecret' },
  });

  const writers: DemoWriter[] = [
    {
      name: 'postgres',
      async write(body, token) {
        try {
          if (unfenced) {
            await pool.query(
              `insert into ${table} (id, body, fencing_token) values (1, $1, $2)
               on conflict (id) do update set body = excluded.body, fencing_token = excluded.fencing_token`,
              [body, formatToken(token)],
            );
          } else {
            await postgres.fencedUpsert(pool, { table, key: ['id'], values: { id: 1, body }, token });
          }
          return { outcome: 'accepted', detail: `row 1 of ${table}` };
        } catch (error) {
          return failed(error);
        }
      },
    },
    {
      name: 's3',
      async write(body, token) {
        try {
          if (unfenced) {
            await client.send(new s3sdk.PutObjectCommand({ Bucket: bucket, Key: key, Body: body, Metadata: { 'fencing-token': formatToken(token) } }));
          } else {
            await s3.fencedPutObject(client, { Bucket: bucket, Key: key, Body: body, token });
          }
          return { outcome: 'accepted', detail: `s3://${bucket}/${key}` };
        } catch (error) {
          return failed(error);
        }
      },
    },
    {
      name: 'http',
      async write(body, token) {
        try {
          const res = await fetch(url, { method: 'PUT', headers: { 'fencing-token': formatToken(token), 'content-type': 'text/plain' }, body });
          const text = await res.text();
          if (res.ok) return { outcome: 'accepted', detail: `PUT ${new URL(url).pathname} ${res.status}` };
          if (res.status === 409) {
            const problem = JSON.parse(text) as { current?: string };
            return { outcome: 'refused', detail: `409 stale: current token ${problem.current ?? '?'}` };
          }
          return { outcome: 'error', detail: `${res.status} ${text.slice(0, 200)}` };
        } catch (error) {
          return failed(error);
        }
      },
    },
  ];

  return {
    writers,
    async read() {
      const row = await pool.query<{ body: string; fencing_token: string }>(`select body, fencing_token::text as fencing_token from ${table} where id = 1`);
      let object: { body: string | null; token: string | null } = { body: null, token: null };
      try {
        const got = await client.send(new s3sdk.GetObjectCommand({ Bucket: bucket, Key: key }));
        object = { body: (await got.Body?.transformToString()) ?? null, token: got.Metadata?.['fencing-token'] ?? null };
      } catch (error) {
        if ((error as { name?: string }).name !== 'NoSuchKey') throw error;
      }
      const res = await fetch(url);
      const service = (await res.json()) as { body: string | null; token: string | null };
      return {
        postgres: { body: row.rows[0]?.body ?? null, token: row.rows[0]?.fencing_token ?? null },
        s3: object,
        http: service,
      };
    },
    async close() {
      client.destroy();
      await pool.end();
    },
  };
}
