// Waiting in tests without timing anything: a condition polled until it holds,
// a promise given a hang guard with a clear message, and a promise resolved
// from outside. Every limit here turns a hang into a named failure; none of
// them is an assertion about how fast something is.

/** Resolve when `predicate` holds; reject naming `what` (or what it returns then) after `limitMs`. */
export async function until(predicate: () => boolean | Promise<boolean>, what: string | (() => string), limitMs = 30_000): Promise<void> {
  const start = Date.now();
  for (;;) {
    if (await predicate()) return;
    if (Date.now() - start > limitMs) {
      throw new Error(`timed out after ${limitMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** `promise`, or a rejection naming `what` after `limitMs`. */
export async function within<T>(promise: Promise<T>, limitMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${limitMs} ms waiting for ${what}`)), limitMs);
  });
  try {
    return await Promise.race([promise, limit]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * `attempt` until it resolves, or reject with its last error after `limitMs`
 * (a source still electing a leader, a node reconnecting, a round trip that
 * outlasted a node timeout on a loaded machine).
 */
export async function retrying<T>(attempt: () => Promise<T>, limitMs: number, what: string): Promise<T> {
  const deadline = performance.now() + limitMs;
  for (;;) {
    try {
      return await attempt();
    } catch (error) {
      if (performance.now() > deadline) throw new Error(`${what}: still failing after ${limitMs} ms: ${(error as Error).message}`, { cause: error });
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (reason: unknown) => void;
}

/** A promise and the functions that settle it. */
export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
