// A server set's fault turn: while one test file, script or scenario holds
// it, the others that pause or kill the same nodes wait. Taken, the set is
// brought to health before the holder breaks anything; given back, it is
// healed first, and the turn is released even when healing fails, so one
// broken run never blocks the next. No vitest here: the compare and fault
// scripts load this outside a test worker.

/** Gives a turn back. */
export type Release = () => Promise<unknown>;

/** A test/servers script (redis.sh, etcd.sh, ...), run with its arguments. */
export type ServerScript = (...args: string[]) => Promise<unknown>;

/** A script's own turn (hold-faults / release-faults), waited for up to `seconds`. */
export function scriptTurn(ctl: ServerScript, seconds: number): () => Promise<Release> {
  return async () => {
    await ctl('hold-faults', String(seconds));
    return () => ctl('release-faults');
  };
}

/** Take a turn with `take`, `ready` the set; the function returned runs `heal` (default: `ready` again), then releases. */
export async function healedTurn(take: () => Promise<Release>, ready: () => Promise<unknown>, heal: () => Promise<unknown> = ready): Promise<() => Promise<void>> {
  const release = await take();
  await ready();
  return async () => {
    try {
      await heal();
    } finally {
      await release();
    }
  };
}
