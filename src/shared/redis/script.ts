// A Lua script and how it is run: by its SHA1 (EVALSHA), its text sent once
// (EVAL) to a server that does not know it (NOSCRIPT: restarted, or SCRIPT
// FLUSH). Shared by the lock source's scripts and the Redis fences'.
import { createHash } from 'node:crypto';
import { send, type RedisCommands } from './client.js';

export interface Script {
  readonly text: string;
  readonly sha: string;
}

export function script(text: string): Script {
  return { text, sha: createHash('sha1').update(text).digest('hex') };
}

/** Run `s` by its SHA1, loading it (EVAL) the first time a server does not know it. */
export function run(client: RedisCommands, where: string, s: Script, keys: readonly string[], args: readonly (string | number | Buffer)[], timeoutMs: number): Promise<unknown> {
  return send(client, where, 'evalsha', [s.sha, keys.length, ...keys, ...args], timeoutMs, s.text);
}
