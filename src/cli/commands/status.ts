/**
 * `fencekeeper status <lock>`: the holder and the waiters, in grant order,
 * with their tokens. With --watch, the same listing again each time the
 * queue changes, as the lock service reports it (never by polling), until
 * SIGINT or SIGTERM (exit 0). A dropped connection is reported and the
 * service reconnects; a session that is gone for good is reported and a new
 * one is made, again and again, until the service answers or the operator
 * stops the command.
 */
import { formatToken } from '../../index.js';
import { UsageError, parse } from '../args.js';
import { ExitCode } from '../exit-codes.js';
import { HELP } from '../help.js';
import { connectUnlessInterrupted, listenForInterrupt } from '../interrupt.js';
import { UnreachableError, type LockService, type LockServiceAddress, type QueueEntry, type QueueEvent } from '../lock-service.js';
import { LOCK_SERVICE_OPTIONS, lockServiceFrom } from '../services/index.js';
import { err, out } from '../output.js';

/** Between two attempts to connect again: doubling from the first, up to the last. */
const RECONNECT_DELAYS_MS = { first: 250, max: 5000 } as const;

export async function status(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { ...LOCK_SERVICE_OPTIONS, json: { type: 'boolean' }, watch: { type: 'boolean' } });
  if (values.help) {
    out(HELP.status);
    return ExitCode.ok;
  }
  const name = positionals[0];
  if (name === undefined || positionals.length !== 1) throw new UsageError('status needs exactly one lock name');
  const address = lockServiceFrom(values);
  address.checkName('lock', name);
  const json = values.json === true;
  // A SIGINT or SIGTERM during the first connect ends the command at once (../interrupt.ts).
  const interruption = listenForInterrupt();
  const service = await connectUnlessInterrupted(address, interruption);
  if (service === null) {
    interruption.end();
    return interruption.exitCode;
  }
  // --watch handles the signals itself from here: they end it with exit 0.
  // It listens before we stop, so a signal caught meanwhile reaches it.
  if (values.watch) return interruption.handOver(() => watch(address, service, name, json));
  // Interrupted during the read: closing the connection ends it.
  const connected = service;
  const onInterrupt = (): void => void connected.close().catch(() => undefined);
  interruption.signal.addEventListener('abort', onInterrupt, { once: true });
  try {
    const entries = await service.queue(name);
    const durability = await service.durability?.(name);
    if (json) out(JSON.stringify({ lock: name, queue: entries.map(entryJson), ...(durability !== undefined && { durability }) }));
    else for (const line of [...table(name, entries), ...(durability === undefined ? [] : durabilityLines(durability))]) out(line);
    return ExitCode.ok;
  } catch (error) {
    if (interruption.by === null) throw error;
    err(`interrupted by ${interruption.by} while reading the queue of ${name}`);
    return interruption.exitCode;
  } finally {
    interruption.signal.removeEventListener('abort', onInterrupt);
    interruption.end();
    await service.close();
  }
}

/** A waiter of a source that takes the token at the grant (PostgreSQL) has none yet: shown as '-' (null in JSON). */
function tokenOf(e: QueueEntry): string | null {
  return e.role === 'waiter' && e.token === 0n ? null : formatToken(e.token);
}

function entryJson(e: QueueEntry): Record<string, string | null> {
  return { role: e.role, token: tokenOf(e), owner: e.owner, session: e.session, node: e.node };
}

/**
 * The service's durability settings, and what they mean for a grant: with
 * no synchronous standby (or synchronous_commit below remote_write for other
 * writers), a failover can lose acknowledged grants.
 */
function durabilityLines(settings: Readonly<Record<string, string>>): string[] {
  const shown = Object.entries(settings).map(([k, v]) => `${k}=${v === '' ? "''" : v}`).join(', ');
  const standbys = settings['synchronous_standby_names'];
  if (standbys === undefined) return [`durability: ${shown}`];
  const meaning =
    standbys === ''
      ? 'no synchronous standby: a grant is acknowledged once on the primary\'s disk, so a failover to a replica can lose acknowledged grants: a double grant, a repeated token'
      : 'a grant is acknowledged once a synchronous standby has it too: a failover to that standby keeps it';
  return [`durability: ${shown} (${meaning})`];
}

function table(name: string, entries: readonly QueueEntry[]): string[] {
  if (entries.length === 0) return [`${name}: free (no holder, no waiters)`];
  const rows = entries.map((e, i) => [String(i), e.role, tokenOf(e) ?? '-', e.owner, e.session]);
  const header = ['#', 'role', 'token', 'owner', 'session'];
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] as string).length)));
  const line = (r: string[]): string => r.map((v, c) => v.padEnd(widths[c] as number)).join('  ').trimEnd();
  return [`${name}: held, ${entries.length - 1} waiting`, line(header), ...rows.map(line)];
}

/** What --watch prints besides the listings: the connection's story. */
type WatchNotice = Exclude<QueueEvent, { type: 'queue' }> | { readonly type: 'lost' | 'connected'; readonly detail: string };

async function watch(address: LockServiceAddress, first: LockService, name: string, json: boolean): Promise<number> {
  if (first.watchQueue === undefined) {
    await first.close();
    throw new UsageError(`status --watch: ${address.description} cannot report changes to a lock's queue; run status without --watch`);
  }
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const show = (event: QueueEvent | WatchNotice): void => {
    const at = new Date().toISOString();
    if (json) {
      const body = event.type === 'queue' ? { queue: event.entries.map(entryJson) } : { detail: event.detail };
      out(JSON.stringify({ event: event.type, lock: name, at, ...body }));
    } else if (event.type === 'queue') {
      out(`--- ${at}`);
      for (const line of table(name, event.entries)) out(line);
    } else {
      err(event.detail);
    }
  };
  let service: LockService | null = first;
  try {
    while (service !== null) {
      try {
        await service.watchQueue!(name, show, stop.signal);
        return ExitCode.ok; // stopped by SIGINT / SIGTERM
      } catch (error) {
        if (!(error instanceof UnreachableError) || stop.signal.aborted) throw error;
        show({ type: 'lost', detail: `${error.message}; connecting again` });
      }
      const lost: LockService = service;
      service = null;
      await lost.close().catch(() => undefined);
      service = await reconnect(address, stop.signal, show);
    }
    return ExitCode.ok;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await service?.close();
  }
}

/** Connect again until it works (null: stopped first), reporting each failure. */
async function reconnect(address: LockServiceAddress, signal: AbortSignal, show: (notice: WatchNotice) => void): Promise<LockService | null> {
  let delay: number = RECONNECT_DELAYS_MS.first;
  for (;;) {
    if (signal.aborted) return null;
    const attempt = address.connect();
    const outcome = await raceAbort(attempt, signal);
    if (outcome === 'aborted') {
      // Whatever the attempt gives, nobody wants it any more.
      attempt.then((s) => s.close(), () => undefined).catch(() => undefined);
      return null;
    }
    if (outcome.ok) {
      show({ type: 'connected', detail: `connected to ${address.description} again` });
      return outcome.service;
    }
    if (!(outcome.error instanceof UnreachableError)) throw outcome.error;
    show({ type: 'lost', detail: `${outcome.error.message}; trying again in ${delay} ms` });
    if ((await sleep(delay, signal)) === 'aborted') return null;
    delay = Math.min(delay * 2, RECONNECT_DELAYS_MS.max);
  }
}

type Attempt = { readonly ok: true; readonly service: LockService } | { readonly ok: false; readonly error: unknown };

function raceAbort(attempt: Promise<LockService>, signal: AbortSignal): Promise<Attempt | 'aborted'> {
  return new Promise((resolve) => {
    const onAbort = (): void => resolve('aborted');
    signal.addEventListener('abort', onAbort, { once: true });
    attempt.then(
      (service) => resolve({ ok: true, service }),
      (error: unknown) => resolve({ ok: false, error }),
    ).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** Wait `ms` (a ref'd timer: the command waits here on purpose), or until stopped. */
function sleep(ms: number, signal: AbortSignal): Promise<'slept' | 'aborted'> {
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve('aborted');
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve('slept');
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
