// Child process for postgres-migrate.test.ts: imports the BUILT adapter (the
// path is given: the test compiles it), migrates the given schema through a
// pg.Pool, and prints what it applied as one JSON line.
import pg from 'pg';

const [adapterPath, databaseUrl, schema] = process.argv.slice(2);
const { migrate } = await import(adapterPath);
const pool = new pg.Pool({ connectionString: databaseUrl, max: 1, options: `-c search_path=${schema}` });
try {
  const result = await migrate(pool);
  process.stdout.write(`${JSON.stringify(result)}\n`);
} finally {
  await pool.end();
}
