/** `fencekeeper migrate`: apply the fence table's migrations to DATABASE_URL's database. */
import { UsageError, databaseUrl, parse } from '../args.js';
import { ExitCode } from '../exit-codes.js';
import { HELP } from '../help.js';
import { err, out } from '../output.js';

export async function migrateCommand(argv: readonly string[]): Promise<number> {
  const { values, positionals } = parse(argv, { 'database-url': { type: 'string' } });
  if (values.help) {
    out(HELP.migrate);
    return ExitCode.ok;
  }
  if (positionals.length > 0) throw new UsageError('migrate takes no arguments');
  const url = databaseUrl(values);
  // The CLI is the top layer: it may load any adapter. pg is the PostgreSQL
  // adapter's optional peer dependency, so both load only for this command.
  const [{ default: pg }, { migrate }] = await Promise.all([import('pg'), import('../../../adapters/postgres/index.js')]);
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    const result = await migrate(pool);
    // Each migration applied by name, then where the schema stands.
    for (const name of result.applied) out(`applied ${name}`);
    const total = `${result.migrations.length} migration${result.migrations.length === 1 ? '' : 's'}`;
    out(result.applied.length === 0 ? `up to date (${total})` : `up to date (${total}, ${result.applied.length} applied now)`);
    return ExitCode.ok;
  } catch (error) {
    err(`migrate failed: ${(error as Error).message}`);
    return ExitCode.unavailable;
  } finally {
    await pool.end();
  }
}
