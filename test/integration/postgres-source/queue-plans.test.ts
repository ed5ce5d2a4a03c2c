// The PostgreSQL source's lock functions ask for a name's holders with the
// kind as a parameter (fencekeeper_lock_holder_ms, called under the name's
// row lock by every waiting enter and, per waiting entry, by every
// heartbeat). Their plans are generic plans: an index whose predicate
// names the kinds (migration 013's holder index) cannot be used by them,
// and the query scanned the whole table, the queue's length per call
// (migration 014 adds an index they can use). Read the function's own
// query from the catalog and plan it as the function does, against a
// queue of thousands: the holders are found through an index, for a plain
// lock and a read-write lock alike.
import { describe, expect, it } from 'vitest';
import { sourceSchema } from './helpers.js';

const db = sourceSchema('pgsrc_plans');
const WAITING = 3000;

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly 'Index Name'?: string;
  readonly Plans?: readonly PlanNode[];
}

/** Every node of a plan that reads `relation`. */
function scansOf(node: PlanNode, relation: string): PlanNode[] {
  const here = node['Relation Name'] === relation ? [node] : [];
  return [...here, ...(node.Plans ?? []).flatMap((child) => scansOf(child, relation))];
}

describe('the lock functions\' plans at a long queue', () => {
  it('fencekeeper_lock_holder_ms finds a name\'s holders through an index in its generic plan (plain and read-write locks), not by scanning the queue', async () => {
    const client = await db.admin.connect();
    try {
      await client.query(`INSERT INTO fencekeeper_lock_sessions (channel, owner, lease_ms, expires_at) SELECT 'plans' || g, 'o', 30000, clock_timestamp() + interval '1 hour' FROM generate_series(1, 4) g`);
      const session = (await client.query<{ id: string }>(`SELECT min(id)::text AS id FROM fencekeeper_lock_sessions`)).rows[0]!.id;
      for (const kind of ['lock', 'rw']) {
        const mode = kind === 'rw' ? `'write'` : 'NULL';
        await client.query(`INSERT INTO fencekeeper_locks (kind, name) VALUES ($1, 'L')`, [kind]);
        await client.query(`INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, mode, token, granted_at) VALUES ($1, 'L', $2, 'o', $1 || '-held', ${mode}, 1, clock_timestamp())`, [kind, session]);
        await client.query(`INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, mode) SELECT $1, 'L', $2, 'o', $1 || '-' || g, ${mode} FROM generate_series(1, ${WAITING}) g`, [kind, session]);
      }
      await client.query('ANALYZE fencekeeper_lock_entries, fencekeeper_lock_sessions, fencekeeper_locks');
      // The function's body as deployed, its parameters as the function passes them.
      const body = (await client.query<{ src: string }>(`SELECT prosrc AS src FROM pg_proc WHERE proname = 'fencekeeper_lock_holder_ms' AND pronamespace = current_schema()::regnamespace`)).rows[0]!.src;
      expect(body).toMatch(/p_kind/);
      await client.query('SET plan_cache_mode = force_generic_plan');
      await client.query(`PREPARE holder_ms(text, text) AS ${body.replace(/\bp_kind\b/g, '$1').replace(/\bp_name\b/g, '$2')}`);
      for (const kind of ['lock', 'rw']) {
        const { rows } = await client.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`EXPLAIN (FORMAT JSON) EXECUTE holder_ms('${kind}', 'L')`);
        const scans = scansOf(rows[0]!['QUERY PLAN'][0]!.Plan, 'fencekeeper_lock_entries');
        expect(scans.length, `${kind}: the plan reads the entries`).toBeGreaterThan(0);
        expect(scans.map((scan) => scan['Node Type']), `${kind}: how the holders are found`).not.toContain('Seq Scan');
      }
      const value = await client.query<{ ms: string }>(`EXECUTE holder_ms('lock', 'L')`);
      expect(Number(Object.values(value.rows[0]!)[0])).toBeGreaterThan(0);
    } finally {
      await client.query('DEALLOCATE ALL').catch(() => undefined);
      await client.query('RESET plan_cache_mode').catch(() => undefined);
      client.release();
    }
  });
});
