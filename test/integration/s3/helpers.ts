// What the S3 integration files share: a client per writer (a fresh fence
// cache) that records every request it sends, a bucket per file, raw reads
// that bypass the adapter, and a rejection matcher.
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import {
  CreateBucketCommand,
  DeleteBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  S3Client,
} from '@aws-sdk/client-s3';
import type { S3ClientConfig } from '@aws-sdk/client-s3';
import { testServers } from '../../helpers/servers.js';
import { TcpProxy } from '../../helpers/tcp-proxy.js';
import type { ProxyOptions } from '../../helpers/tcp-proxy.js';

/** The run's S3 server (the global setup's, or S3_*): never a guessed address. */
export const s3Config: S3ClientConfig = { ...testServers().s3, forcePathStyle: true };

/** One request as the client's own middleware saw it: proof the user's stack still runs around ours. */
export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: Record<string, string>;
  status?: number;
}

export interface RecordingClient {
  readonly client: S3Client;
  readonly seen: SeenRequest[];
}

/** A fresh client (so a fresh fence cache) with a user middleware that records every request it sends. */
export function newClient(extra: Partial<S3ClientConfig> = {}): RecordingClient {
  const client = new S3Client({ ...s3Config, ...extra });
  const seen: SeenRequest[] = [];
  client.middlewareStack.add(
    (next) => async (args) => {
      const request = args.request as { method: string; path: string; headers: Record<string, string> };
      const entry: SeenRequest = { method: request.method, path: decodeURIComponent(request.path), headers: { ...request.headers } };
      seen.push(entry);
      try {
        const out = await next(args);
        entry.status = (out.response as { statusCode?: number }).statusCode ?? 0;
        return out;
      } catch (error) {
        entry.status = (error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode ?? -1;
        throw error;
      }
    },
    { step: 'finalizeRequest', name: 'testRecorder' },
  );
  return { client, seen };
}

/**
 * A client that reaches the server through a TCP proxy the test owns (real
 * network faults: `proxy.loseReplyTo(marker)` lets the request whose bytes
 * contain `marker` land and resets the connection on its reply). No SDK
 * retries, so the adapter's own handling is what runs. Close the proxy and
 * destroy the client when done.
 */
export async function proxiedClient(options: ProxyOptions = {}): Promise<RecordingClient & { readonly proxy: TcpProxy }> {
  const server = new URL(String(s3Config.endpoint));
  const proxy = await TcpProxy.start({ host: server.hostname, port: Number(server.port) }, options);
  return { proxy, ...newClient({ endpoint: `http://${proxy.address}`, maxAttempts: 1 }) };
}

export function randomPrefix(): string {
  return `t-${randomBytes(6).toString('hex')}`;
}

/** A bucket of the file's own, created and emptied by the caller's beforeAll/afterAll. */
export class TestBucket {
  readonly name: string;
  readonly admin = newClient().client;

  constructor(label: string) {
    this.name = `fk-${label}-${randomBytes(5).toString('hex')}`;
  }

  async create(): Promise<void> {
    await this.admin.send(new CreateBucketCommand({ Bucket: this.name }));
  }

  async keys(Prefix?: string): Promise<string[]> {
    const keys: string[] = [];
    let ContinuationToken: string | undefined;
    do {
      const page = await this.admin.send(new ListObjectsV2Command({
        Bucket: this.name,
        ...(Prefix === undefined ? {} : { Prefix }),
        ...(ContinuationToken === undefined ? {} : { ContinuationToken }),
      }));
      for (const object of page.Contents ?? []) keys.push(object.Key!);
      ContinuationToken = page.NextContinuationToken;
    } while (ContinuationToken !== undefined);
    return keys.sort();
  }

  async remove(): Promise<void> {
    for (const Key of await this.keys()) await this.admin.send(new DeleteObjectCommand({ Bucket: this.name, Key }));
    await this.admin.send(new DeleteBucketCommand({ Bucket: this.name }));
    this.admin.destroy();
  }

  /** The object as stored, read without the adapter. */
  async raw(Key: string): Promise<{ body: string; metadata: Record<string, string>; etag: string }> {
    const out = await this.admin.send(new GetObjectCommand({ Bucket: this.name, Key }));
    return { body: await out.Body!.transformToString(), metadata: out.Metadata ?? {}, etag: out.ETag ?? '' };
  }

  async exists(Key: string): Promise<boolean> {
    try {
      await this.admin.send(new HeadObjectCommand({ Bucket: this.name, Key }));
      return true;
    } catch (error) {
      if ((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode === 404) return false;
      throw error;
    }
  }
}

export async function expectRejects<E>(promise: Promise<unknown>, type: abstract new (...args: never[]) => E): Promise<E> {
  const error = await promise.then(
    () => { throw new Error('expected a rejection'); },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(type);
  return error as E;
}

/** A gate a test opens by hand: `wait()` resolves once `open()` was called. */
export class Gate {
  #open!: () => void;
  readonly #opened = new Promise<void>((resolve) => { this.#open = resolve; });
  open(): void { this.#open(); }
  wait(): Promise<void> { return this.#opened; }
}

/** A request as a test middleware sees it, before it is sent. */
export interface OutgoingRequest {
  readonly method: string;
  /** The decoded path: /bucket/key in path-style addressing. */
  readonly path: string;
}

function outgoing(args: { request: unknown }): OutgoingRequest {
  const request = args.request as { method: string; path: string };
  return { method: request.method, path: decodeURIComponent(request.path) };
}

/**
 * Let matching requests reach the server, then pretend their answer was a 500
 * (a reply lost after the write landed). `n` counts the requests of that method.
 */
export function loseReplies(client: S3Client, which: (request: OutgoingRequest, n: number) => boolean): void {
  const counts = new Map<string, number>();
  client.middlewareStack.add(
    (next) => async (args) => {
      const request = outgoing(args);
      const n = (counts.get(request.method) ?? 0) + 1;
      counts.set(request.method, n);
      const out = await next(args);
      if (which(request, n)) {
        throw Object.assign(new Error('injected: reply lost'), {
          name: 'InternalError', $fault: 'server', $metadata: { httpStatusCode: 500 },
        });
      }
      return out;
    },
    { step: 'finalizeRequest', name: 'testLoseReply', priority: 'low' },
  );
}

/**
 * Hold matching requests before they are sent until `until()` resolves; the
 * first held request opens `reached` (a process paused right before a request).
 */
export function holdRequests(
  client: S3Client,
  which: (request: OutgoingRequest) => boolean,
  until: () => Promise<void>,
  reached: Gate = new Gate(),
): Gate {
  client.middlewareStack.add(
    (next) => async (args) => {
      if (which(outgoing(args))) {
        reached.open();
        await until();
      }
      return next(args);
    },
    { step: 'finalizeRequest', name: 'testHold', priority: 'low' },
  );
  return reached;
}

export const byValue = (x: bigint, y: bigint): number => (x < y ? -1 : x > y ? 1 : 0);
