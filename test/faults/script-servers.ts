// The servers of run-checker.ts, a plain Node script: test/helpers/servers.ts
// imports 'vitest', which only loads inside a vitest worker, so the script
// reads the same environment variables (SERVER_ENV). The sources' fault
// scripts are driven by source-faults.ts, from the same environment.
import { SERVER_DEFAULTS, SERVER_ENV, serversReadBy, type ProvidedServers, type TestServers } from '../helpers/server-env.js';

function env(key: keyof ProvidedServers): string {
  const value = process.env[SERVER_ENV[key]];
  if (value !== undefined && value !== '') return value;
  const fallback = SERVER_DEFAULTS[key];
  if (fallback !== undefined) return fallback;
  throw new Error(`${SERVER_ENV[key]} is not set (and the global setup did not start that server)`);
}

/** Like testServers(): each field is read when used, so a script needs only the servers it touches. */
export function scriptServers(): TestServers {
  return serversReadBy(env);
}
