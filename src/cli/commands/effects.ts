/** `fencekeeper effects`: the effect ledger, or with --pending what an operator must reconcile. */
import { FencekeeperError, formatToken } from '../../index.js';
import { UsageError, databaseUrl, nonNegativeInt, parse, positiveInt } from '../args.js';
import { ExitCode } from '../exit-codes.js';
import { HELP } from '../help.js';
import { err, out } from '../output.js';

/** Without --pending and --limit, the listing stops here: a busy ledger holds every effect ever made. */
const DEFAULT_LIMIT = 1000;

export async function effectsCommand(argv: readonly string[]): Promise<number> {
  if (argv[0] === 'settle') return settleCommand(argv.slice(1));
  const { values, positionals } = parse(argv, {
    'database-url': { type: 'string' },
    pending: { type: 'boolean' },
    json: { type: 'boolean' },
    resource: { type: 'string' },
    'older-than': { type: 'string' },
    limit: { type: 'string' },
  });
  if (values.help) {
    out(HELP.effects);
    return ExitCode.ok;
  }
  if (positionals.length > 0) throw new UsageError('effects takes no arguments');
  const url = databaseUrl(values);
  const resource = values.resource as string | undefined;
  if (resource === '') throw new UsageError('--resource must not be empty');
  const olderThanMs = nonNegativeInt(values['older-than'] as string | undefined, '--older-than');
  const limit = positiveInt(values.limit as string | undefined, '--limit');
  const pending = values.pending === true;
  // pg and the PostgreSQL adapter load only for the commands that need them.
  const [{ default: pg }, { listEffects }] = await Promise.all([import('pg'), import('../../../adapters/postgres/index.js')]);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    const effects = await listEffects(pool, {
      ...(resource === undefined ? {} : { resource }),
      ...(olderThanMs === undefined ? {} : { olderThanMs }),
      ...(pending ? { state: 'pending' as const } : {}),
      ...(limit !== undefined ? { limit } : pending ? {} : { limit: DEFAULT_LIMIT }),
    });
    if (values.json) {
      out(JSON.stringify(effects.map((e) => ({
        resource: e.resource,
        key: e.key,
        state: e.state,
        attempt: e.attempt,
        token: formatToken(e.token),
        idempotencyKey: e.idempotencyKey,
        deadline: e.deadline?.toISOString() ?? null,
        graceMs: e.graceMs,
        ...(e.state === 'succeeded' ? { resultStored: e.resultStored, result: e.result } : {}),
        failure: e.failure,
        createdAt: e.createdAt.toISOString(),
        updatedAt: e.updatedAt.toISOString(),
      }))));
      return ExitCode.ok;
    }
    if (effects.length === 0) {
      out(pending ? 'no pending effects' : 'no effects');
      return ExitCode.ok;
    }
    const header = ['state', 'resource', 'key', 'attempt', 'token', 'idempotency key', 'deadline', 'since'];
    const rows = effects.map((e) => [e.state, e.resource, e.key, String(e.attempt), formatToken(e.token), e.idempotencyKey, e.deadline?.toISOString() ?? '-', e.updatedAt.toISOString()]);
    const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] as string).length)));
    const line = (r: string[]): string => r.map((v, c) => v.padEnd(widths[c] as number)).join('  ').trimEnd();
    out(line(header));
    for (const r of rows) out(line(r));
    if (pending) out(`${effects.length} pending: ask the outside system about each idempotency key, then settle it (withEffect with a reconcile)`);
    return ExitCode.ok;
  } catch (error) {
    // No ledger here: the adapter's SchemaMissingError already says to run `fencekeeper migrate`.
    err(`effects failed: ${(error as Error).message}`);
    return ExitCode.unavailable;
  } finally {
    await pool.end();
  }
}

/**
 * `fencekeeper effects settle <resource> <key> --outcome happened|not-happened`:
 * record what the outside system answered about a pending effect
 * (settlePendingEffect: 'not-happened' only once its call can no longer land).
 */
async function settleCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, {
    'database-url': { type: 'string' },
    outcome: { type: 'string' },
  });
  if (values.help) {
    out(HELP.effects);
    return ExitCode.ok;
  }
  const [resource, key] = positionals;
  if (resource === undefined || key === undefined || positionals.length !== 2) throw new UsageError('effects settle needs <resource> <key>');
  const outcome = values.outcome as string | undefined;
  if (outcome !== 'happened' && outcome !== 'not-happened') throw new UsageError('effects settle needs --outcome happened or --outcome not-happened');
  const url = databaseUrl(values);
  const [{ default: pg }, { settlePendingEffect }] = await Promise.all([import('pg'), import('../../../adapters/postgres/index.js')]);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    const settled = await settlePendingEffect(pool, resource, key, outcome);
    out(`${settled.resource} ${settled.key} (attempt ${settled.attempt}, idempotency key ${settled.idempotencyKey}): recorded ${settled.state}`);
    return ExitCode.ok;
  } catch (error) {
    // Refused (not pending, unknown, or not yet safe to call not-happened): nothing changed.
    if (error instanceof FencekeeperError && (error.code === 'INVALID_ARGUMENT' || error.code === 'UNKNOWN_OUTCOME')) {
      err(`effects settle refused: ${error.message}; nothing changed`);
      return ExitCode.usage;
    }
    err(`effects settle failed: ${(error as Error).message}`);
    return ExitCode.unavailable;
  } finally {
    await pool.end();
  }
}
