// The resources a compare run writes to, each twice: fenced (withFence on a
// PostgreSQL row, fencedPutObject on an S3 object, fencing() in front of an
// HTTP resource) and plain (an UPDATE, a PutObject, a route without fencing),
// so a stale holder's write can be counted as accepted or refused both ways.
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import express from 'express';
import pg from 'pg';
import { MemoryFenceStore, fencing, fencingHeaders } from '../../adapters/express/index.js';
import { migrate, withFence } from '../../adapters/postgres/index.js';
import { fencedPutObject } from '../../adapters/s3/index.js';
import { StaleTokenError } from '../../src/errors.js';
import type { FencingToken } from '../../src/token.js';
import { environmentServers } from '../helpers/server-env.js';
import { uniqueBucket, uniqueTable } from '../helpers/unique.js';
import { serve, type Served } from '../helpers/serve.js';

/** Where a write went and whether the resource took it. */
export interface Written {
  readonly postgres: boolean;
  readonly s3: boolean;
  readonly http: boolean;
}

export class Resources {
  readonly pool: pg.Pool;
  readonly s3: S3Client;
  readonly bucket = uniqueBucket('fk-compare');
  /** The plain resources' table: resource -> the token of the last write. */
  readonly table = uniqueTable('compare_unfenced');
  /** The token of the last plain HTTP write, per resource name. */
  readonly lastPlainHttp = new Map<string, bigint>();
  #served: Served | undefined;
  #base = '';

  private constructor() {
    const servers = environmentServers();
    this.pool = new pg.Pool({ connectionString: servers.databaseUrl, max: 8 });
    this.s3 = new S3Client({ ...servers.s3, forcePathStyle: true });
  }

  static async open(): Promise<Resources> {
    const r = new Resources();
    await migrate(r.pool);
    await r.pool.query(`CREATE TABLE ${r.table} (resource text PRIMARY KEY, token text NOT NULL)`);
    await r.s3.send(new CreateBucketCommand({ Bucket: r.bucket }));
    const app = express();
    app.put('/fenced/:name', fencing({ store: new MemoryFenceStore(), resource: (req) => `http/${String(req.params.name)}` }), (_req, res) => {
      res.json({ ok: true });
    });
    app.put('/plain/:name', (req, res) => {
      r.lastPlainHttp.set(String(req.params.name), BigInt(String(req.headers['x-writer-token'])));
      res.json({ ok: true });
    });
    r.#served = await serve(app);
    r.#base = `http://127.0.0.1:${(r.#served.server.address() as AddressInfo).port}`;
    return r;
  }

  fencedUrl(name: string): string {
    return `${this.#base}/fenced/${name}`;
  }

  plainUrl(name: string): string {
    return `${this.#base}/plain/${name}`;
  }

  /**
   * A write with `token` through the three fences: true where the resource
   * accepted it. Every body is unique (the S3 adapter refuses to write a body
   * in place over the same bytes, which two holders with one token would).
   */
  async writeFenced(name: string, token: FencingToken, writer: string): Promise<Written> {
    const resource = `compare/${name}`;
    const refused = (error: unknown): false => {
      if (error instanceof StaleTokenError) return false;
      throw error;
    };
    const [postgres, s3, http] = await Promise.all([
      withFence(this.pool, resource, token, async (client) => client.query({ text: 'SELECT 1' })).then(() => true, refused),
      fencedPutObject(this.s3, { Bucket: this.bucket, Key: resource, Body: `from ${token} (${writer} ${randomBytes(6).toString('hex')})`, token }).then(() => true, refused),
      fetch(this.fencedUrl(name), { method: 'PUT', headers: fencingHeaders({ token }) }).then((r) => {
        if (r.status !== 200 && r.status !== 409) throw new Error(`fenced HTTP PUT: status ${r.status}`);
        return r.status === 200;
      }),
    ]);
    return { postgres, s3, http };
  }

  /** A write with `token` that nothing checks (what a program without fencing does). */
  async writePlain(name: string, token: FencingToken): Promise<void> {
    const resource = `compare/${name}`;
    await Promise.all([
      this.pool.query({
        text: `INSERT INTO ${this.table} (resource, token) VALUES ($1, $2) ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token`,
        values: [resource, String(token)],
      }),
      this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: `${resource}.unfenced`, Body: `from ${token}` })),
      fetch(this.plainUrl(name), { method: 'PUT', headers: { 'x-writer-token': String(token) } }).then((r) => {
        if (r.status !== 200) throw new Error(`plain HTTP PUT: status ${r.status}`);
      }),
    ]);
  }

  /** Whose write each plain resource keeps now: true where it is `token`'s (the last write won, stale or not). */
  async plainHolds(name: string, token: FencingToken): Promise<Written> {
    const resource = `compare/${name}`;
    const row = await this.pool.query<{ token: string }>({ text: `SELECT token FROM ${this.table} WHERE resource = $1`, values: [resource] });
    const object = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: `${resource}.unfenced` }));
    const body = await object.Body?.transformToString();
    return {
      postgres: row.rows[0]?.token === String(token),
      s3: body === `from ${token}`,
      http: this.lastPlainHttp.get(name) === token,
    };
  }

  async close(): Promise<void> {
    await this.#served?.close();
    await this.pool.query(`DROP TABLE IF EXISTS ${this.table}`).catch(() => {});
    await this.pool.end();
    try {
      let ContinuationToken: string | undefined;
      do {
        const page = await this.s3.send(new ListObjectsV2Command({ Bucket: this.bucket, ...(ContinuationToken !== undefined && { ContinuationToken }) }));
        for (const o of page.Contents ?? []) await this.s3.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: o.Key }));
        ContinuationToken = page.NextContinuationToken;
      } while (ContinuationToken !== undefined);
      await this.s3.send(new DeleteBucketCommand({ Bucket: this.bucket }));
    } catch {
      // a bucket left behind costs nothing but its name
    }
    this.s3.destroy();
  }
}
