// This process's own last write per (client, bucket, key): the ETag it got back
// and the fence it wrote. It lets the steady state (a holder rewriting a key it
// wrote last) go out with no HEAD first.
//
// Why trusting it is safe: the entry is only a guess at the object's ETag. The
// PUT is conditioned on it, so a wrong guess costs a 412 and a fresh HEAD, never
// a wrong write. Refusing a smaller token from the cache alone is also right:
// the cached token was accepted once, and fences only go up.
import type { StoredFence } from './metadata.js';

/** Our own last write to a key, as a HEAD would have shown it right after. */
export type CachedFence = StoredFence;

/** Bound per client, so a process writing millions of distinct keys does not grow without end. */
const MAX_ENTRIES_PER_CLIENT = 4096;

// Keyed by the client object: two clients never share entries (they may point
// at different endpoints or accounts), and a dropped client takes its entries.
const caches = new WeakMap<object, Map<string, CachedFence>>();

function entryKey(bucket: string, key: string): string {
  return `${bucket}\u0000${key}`;
}

export function getCachedFence(client: object, bucket: string, key: string): CachedFence | undefined {
  const cache = caches.get(client);
  if (cache === undefined) return undefined;
  const k = entryKey(bucket, key);
  const entry = cache.get(k);
  if (entry !== undefined) {
    // Least-recently-used order: Map keeps insertion order, so re-insert on use.
    cache.delete(k);
    cache.set(k, entry);
  }
  return entry;
}

export function setCachedFence(client: object, bucket: string, key: string, entry: CachedFence): void {
  let cache = caches.get(client);
  if (cache === undefined) {
    cache = new Map();
    caches.set(client, cache);
  }
  const k = entryKey(bucket, key);
  cache.delete(k);
  cache.set(k, entry);
  if (cache.size > MAX_ENTRIES_PER_CLIENT) {
    const oldest = cache.keys().next();
    if (oldest.done !== true) cache.delete(oldest.value);
  }
}

export function forgetCachedFence(client: object, bucket: string, key: string): void {
  caches.get(client)?.delete(entryKey(bucket, key));
}
