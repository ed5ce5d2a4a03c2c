// A Kysely compiled query built without importing kysely (an optional peer
// dependency): the shape `CompiledQuery.raw(sql, parameters)` builds, which
// Kysely's executeQuery runs as written. Shared by the PostgreSQL fences
// (adapters/postgres/) and the source's withLease (src/sources/postgres/),
// both of which take a user's Kysely instance.
import { randomUUID } from 'node:crypto';

/** Kysely's compiled query: a raw node, as `CompiledQuery.raw()` builds it. */
export interface KyselyCompiledQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
  readonly query: { readonly kind: 'RawNode'; readonly sqlFragments: readonly string[]; readonly parameters: readonly never[] };
  readonly queryId: { readonly queryId: string };
}

/** The shape `CompiledQuery.raw(sql, parameters)` builds, without importing kysely. */
export function rawQuery(sql: string, parameters: readonly unknown[]): KyselyCompiledQuery {
  return Object.freeze({
    sql,
    parameters: Object.freeze([...parameters]),
    query: Object.freeze({ kind: 'RawNode' as const, sqlFragments: Object.freeze([sql]), parameters: Object.freeze([]) as readonly never[] }),
    queryId: Object.freeze({ queryId: randomUUID() }),
  });
}
