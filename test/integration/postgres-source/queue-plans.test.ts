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
//
// The second test runs the handoff path itself (a holder's leave, a waiter's
// enter, of every kind) at a queue of thousands and reads the plan of every
// statement the functions run, with the rows each plan node read
// (auto_explain, nested statements included). A statement under the name's
// row lock that reads the whole queue makes each release and join as slow
// as the queue is long: the reap that walked the queue to find expired
// sessions, the enter that asked whether the queue was empty with PERFORM
// (which reads every row), the leave that found its entry by id among all
// its session's, the hand-over and the head test that joined the queue to
// its sessions and sorted it (migration 015 removes them; a leave by request
// key, an acquire whose reply was lost, still reads its session's entries).
// It runs twice: with the statistics of before the name's queue formed (a
// queue filled in seconds, a server with autovacuum off), and after ANALYZE.
//
// The third counts the calls a heartbeat makes for a session waiting with a
// hundred entries on one name: the name's head and its holder's lease are
// asked once, not once per entry (every third of a lease, per session).
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { sourceSchema } from './helpers.js';

const db = sourceSchema('pgsrc_plans');
const walks = sourceSchema('pgsrc_walks');
const WAITING = 3000;
/** The most rows of the queue one plan node may read in the handoff path: a few, never a share of the queue. */
const FEW = 50;

interface PlanNode {
  readonly 'Node Type': string;
  readonly 'Relation Name'?: string;
  readonly 'Index Name'?: string;
  readonly Plans?: readonly PlanNode[];
}

interface AnalyzedNode extends PlanNode {
  readonly 'Actual Rows'?: number;
  readonly 'Actual Loops'?: number;
  readonly 'Rows Removed by Filter'?: number;
  readonly 'Rows Removed by Index Recheck'?: number;
  readonly Plans?: readonly AnalyzedNode[];
}

/** Rows of fencekeeper_lock_entries (its table or one of its indexes) each node of a plan read, with the node. */
function entryReads(node: AnalyzedNode): { node: string; rows: number }[] {
  const onEntries = node['Relation Name'] === 'fencekeeper_lock_entries' || (node['Index Name'] ?? '').startsWith('fencekeeper_lock_entries');
  const read = ((node['Actual Rows'] ?? 0) + (node['Rows Removed by Filter'] ?? 0) + (node['Rows Removed by Index Recheck'] ?? 0)) * (node['Actual Loops'] ?? 1);
  const here = onEntries ? [{ node: `${node['Node Type']}${node['Index Name'] === undefined ? '' : ` using ${node['Index Name']}`}`, rows: read }] : [];
  return [...here, ...(node.Plans ?? []).flatMap(entryReads)];
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

  it('a release and a join read a few of the name\'s entries, not its queue, whatever the table\'s statistics (every kind)', async () => {
    const client = await walks.admin.connect();
    // auto_explain's plans of every statement, nested ones included, reach us as notices.
    const plans: { query: string; plan: AnalyzedNode }[] = [];
    const onNotice = (notice: { readonly message?: string | undefined }): void => {
      const at = notice.message?.indexOf('{') ?? -1;
      if (at < 0) return;
      const explained = JSON.parse(notice.message!.slice(at)) as { 'Query Text': string; Plan: AnalyzedNode };
      plans.push({ query: explained['Query Text'], plan: explained.Plan });
    };
    client.on('notice', onNotice);
    const q = (text: string, values: unknown[] = []): Promise<pg.QueryResult> => client.query(text, values);
    try {
      // The statistics stay as this test leaves them (no autovacuum in between).
      await q('ALTER TABLE fencekeeper_lock_entries SET (autovacuum_enabled = false)');
      // Four live sessions, and an expired one still queued on another name (the reap finds it, and leaves this name's queue alone).
      const live = (await q(`INSERT INTO fencekeeper_lock_sessions (channel, owner, lease_ms, expires_at) SELECT 'walks' || g, 'o', 30000, clock_timestamp() + interval '1 hour' FROM generate_series(1, 4) g RETURNING id::text AS id`)).rows.map((r) => r.id as string);
      // First, statistics from before this name's queue formed: analyzed while another name had a short queue, since gone.
      await q(`INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request) SELECT 'lock', 'earlier', $1, 'o', 'earlier-' || g FROM generate_series(1, 200) g`, [live[3]]);
      await q('ANALYZE fencekeeper_lock_entries, fencekeeper_lock_sessions, fencekeeper_locks');
      await q(`DELETE FROM fencekeeper_lock_entries WHERE name = 'earlier'`);
      const expired = (await q(`INSERT INTO fencekeeper_lock_sessions (channel, owner, lease_ms, expires_at) VALUES ('walks-expired', 'o', 30000, clock_timestamp() - interval '1 second') RETURNING id::text AS id`)).rows[0]!.id as string;
      const [holderSession, joinerSession] = [live[0]!, live[1]!];
      const kinds = [
        { kind: 'lock', mode: null, permits: null },
        { kind: 'election', mode: null, permits: null },
        { kind: 'rw', mode: 'write', permits: null },
        { kind: 'permit', mode: null, permits: 1 },
      ] as const;
      const holders = new Map<string, string>();
      for (const { kind, mode, permits } of kinds) {
        const slot = kind === 'permit' ? 0 : null;
        await q(`INSERT INTO fencekeeper_locks (kind, name) VALUES ($1, 'Q')`, [kind]);
        const held = await q(
          `INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, mode, slot, permits, token, granted_at)
           VALUES ($1, 'Q', $2, 'o', $1 || '-held', $3, $4, $5, nextval('fencekeeper_lock_tokens'), clock_timestamp()) RETURNING id::text AS id`,
          [kind, holderSession, mode, slot, permits],
        );
        holders.set(kind, held.rows[0]!.id as string);
        // Most waiters in the holder's own session: a lookup by session reads them all.
        await q(
          `INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, mode, permits)
           SELECT $1, 'Q', CASE WHEN g % 10 = 0 THEN $3::bigint ELSE $2::bigint END, 'o', $1 || '-' || g, $4, $5 FROM generate_series(1, ${WAITING}) g`,
          [kind, holderSession, live[2]!, mode, permits],
        );
        await q(`INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, mode, permits) VALUES ($1, 'other', $2, 'o', $1 || '-expired', $3, $4)`, [kind, expired, mode, permits]);
      }
      await q(`LOAD 'auto_explain'`);
      await q(`SET auto_explain.log_level = notice`);
      await q(`SET auto_explain.log_format = json`);
      await q(`SET auto_explain.log_analyze = on`);
      await q(`SET auto_explain.log_timing = off`);
      await q(`SET auto_explain.log_nested_statements = on`);
      for (const statistics of ['analyzed before the queue formed', 'analyzed'] as const) {
        if (statistics === 'analyzed') await q('ANALYZE fencekeeper_lock_entries, fencekeeper_lock_sessions, fencekeeper_locks');
        for (const { kind, mode, permits } of kinds) {
          // Each call in a transaction rolled back: the next one finds the same queue.
          const paths: [string, string, unknown[]][] = [
            ['release', 'SELECT fencekeeper_lock_leave($1, $2, NULL)', [holderSession, holders.get(kind)]],
            kind === 'lock' || kind === 'election'
              ? ['join', `SELECT * FROM fencekeeper_lock_enter($1, $2, 'Q', 'o', true, 'walks-join')`, [joinerSession, kind]]
              : ['join', `SELECT * FROM fencekeeper_lock_enter_kind($1, $2, 'Q', 'o', true, 'walks-join', $3, $4)`, [joinerSession, kind, mode, permits]],
          ];
          for (const [path, text, values] of paths) {
            await q('BEGIN');
            try {
              await q('SET LOCAL auto_explain.log_min_duration = 0');
              plans.length = 0;
              const { rows } = await q(text, values);
              await q('SET LOCAL auto_explain.log_min_duration = -1');
              // The call did its work: a release grants the next waiter, a join queues.
              const answer = Object.values(rows[0]!);
              if (path === 'join') expect(answer[0], `${kind} ${path}`).toBe('waiting');
              else expect(answer[0], `${kind} ${path}: the entry granted next`).not.toBeNull();
            } finally {
              await q('ROLLBACK');
            }
            const nested = plans.filter((p) => !p.query.includes('auto_explain'));
            expect(nested.length, `${kind} ${path}: plans seen`).toBeGreaterThan(3);
            for (const { query, plan } of nested) {
              for (const read of entryReads(plan)) {
                expect(read.rows, `${kind} ${path} (${statistics}): ${read.node} in ${query.replace(/\s+/g, ' ').trim()}`).toBeLessThan(FEW);
              }
            }
          }
        }
      }
    } finally {
      client.off('notice', onNotice);
      await client.query('ROLLBACK').catch(() => undefined);
      client.release(true);
    }
  });

  it('a heartbeat asks for a name\'s head and holder once per name, not once per waiting entry of the session', async () => {
    const client = await db.admin.connect();
    try {
      const session = (await client.query<{ id: string }>(`INSERT INTO fencekeeper_lock_sessions (channel, owner, lease_ms, expires_at) VALUES ('beats', 'o', 30000, clock_timestamp() + interval '1 hour') RETURNING id::text AS id`)).rows[0]!.id;
      await client.query(`INSERT INTO fencekeeper_locks (kind, name) VALUES ('lock', 'B')`);
      await client.query(`INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request, token, granted_at) VALUES ('lock', 'B', $1, 'o', 'beats-held', nextval('fencekeeper_lock_tokens'), clock_timestamp())`, [session]);
      const waiting = (await client.query<{ id: string }>(`INSERT INTO fencekeeper_lock_entries (kind, name, session_id, owner, request) SELECT 'lock', 'B', $1, 'o', 'beats-' || g FROM generate_series(1, 100) g RETURNING id::text AS id`, [session])).rows.map((r) => r.id);
      await client.query('BEGIN');
      // This transaction's own count of calls per function (track_functions counts plpgsql and non-inlined SQL functions).
      await client.query(`SET LOCAL track_functions = 'all'`);
      const beat = (await client.query<{ ids: string[]; heads: boolean[]; holder_ms: string[] }>(`SELECT ids, heads, holder_ms FROM fencekeeper_lock_heartbeat($1, $2::bigint[])`, [session, waiting])).rows[0]!;
      const calls = new Map((await client.query<{ funcname: string; calls: string }>(`SELECT funcname, calls::text AS calls FROM pg_stat_xact_user_functions WHERE schemaname = current_schema()`)).rows.map((r) => [r.funcname, Number(r.calls)]));
      await client.query('ROLLBACK');
      // The report itself: every entry, the first waiter alone at the head, the holder's lease left beside each.
      expect(beat.ids).toEqual(waiting);
      expect(beat.heads).toEqual(waiting.map((_, i) => i === 0));
      expect(beat.holder_ms.every((ms) => Number(ms) > 0)).toBe(true);
      expect(calls.get('fencekeeper_lock_holder_ms') ?? 0, 'holder_ms calls for one name').toBeLessThanOrEqual(1);
      expect((calls.get('fencekeeper_lock_is_head') ?? 0) + (calls.get('fencekeeper_lock_next_waiter') ?? 0), 'head lookups for one name').toBeLessThanOrEqual(1);
    } finally {
      await client.query('ROLLBACK').catch(() => undefined);
      client.release();
    }
  });
});
