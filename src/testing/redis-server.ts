/**
 * A throwaway Redis for a test: the machine's redis-server on a port of its
 * own, its files in a temporary directory, stopped (and its files removed)
 * by stop().
 *
 *   const redis = await startRedis();              // redis://127.0.0.1:<port>
 *   const client = new Redis(redis.url);            // ioredis, or any client
 *   ...
 *   await redis.stop();
 *
 * Without snapshots (save ""), and without an append-only file unless
 * `appendOnly` asks for one: then with `appendfsync always`, the setting
 * under which an acknowledged write survives a restart (what a Redlock
 * quorum's counter needs). `args` adds any other redis-server flag, e.g.
 * ['--enable-debug-command', 'local'] for DEBUG SLEEP (a paused node).
 */
import { join } from 'node:path';
import { InvalidArgumentError } from '../errors.js';
import { ask, launch, requireExecutable, temporaryDirectory, type ThrowawayServer } from './server-process.js';

/** Settings of a throwaway Redis (startRedis). */
export interface RedisServerOptions {
  /** The port on 127.0.0.1. Default: a free one. */
  readonly port?: number;
  /** The redis-server command. Default: redis-server on PATH. */
  readonly redisServer?: string;
  /** Keep an append-only file, fsynced on every write. Default false (the data lives in memory only). */
  readonly appendOnly?: boolean;
  /** More redis-server arguments, after fencekeeper's own. */
  readonly args?: readonly string[];
  /** Give up if the server does not answer PING within this long. Default 30000 ms. */
  readonly startTimeoutMs?: number;
}

/** Its directory is its working directory (the append-only file) and holds redis.log. */
export interface RedisServer extends ThrowawayServer {
  /** 'redis://127.0.0.1:port' */
  readonly url: string;
}

/**
 * Starts a throwaway redis-server of the machine's packages on a free port of
 * 127.0.0.1, its data in a temporary directory removed by stop(). Rejects with
 * ServerNotInstalledError when redis-server is missing (naming what to install).
 */
export async function startRedis(options: RedisServerOptions = {}): Promise<RedisServer> {
  const { port, startTimeoutMs = 30_000, appendOnly = false, args = [] } = options;
  if (port !== undefined && (!Number.isInteger(port) || port < 1 || port > 65535)) {
    throw new InvalidArgumentError(`startRedis(): port must be a TCP port (1..65535), got ${String(port)}`);
  }
  if (!Number.isInteger(startTimeoutMs) || startTimeoutMs < 1) {
    throw new InvalidArgumentError(`startRedis(): startTimeoutMs must be a positive integer, got ${String(startTimeoutMs)}`);
  }
  if (!Array.isArray(args) || args.some((a) => typeof a !== 'string')) throw new InvalidArgumentError('startRedis(): args must be an array of strings');
  const command = requireExecutable(options.redisServer ?? 'redis-server', 'Redis (Debian/Ubuntu: apt-get install redis-server)', 'startRedis()');
  const directory = await temporaryDirectory('fencekeeper-redis-');
  const logFile = join(directory, 'redis.log');
  const launched = await launch({
    what: 'Redis',
    command,
    port,
    logFile,
    startTimeoutMs,
    directory,
    args: (p) => [
      '--port', String(p),
      '--bind', '127.0.0.1',
      '--dir', directory,
      '--daemonize', 'no',
      '--save', '',
      '--appendonly', appendOnly ? 'yes' : 'no',
      '--appendfsync', 'always',
      ...args,
    ],
    // A server still loading its data answers -LOADING: not ready.
    ready: async (p) => (await ask(p, 'PING\r\n', 1000)).startsWith('+PONG'),
  });
  return Object.freeze({ ...launched, url: `redis://127.0.0.1:${launched.port}` });
}
