import type { SqlExecutor } from './sql-executor.js';

/**
 * The subset of a Kysely `Transaction` (or `Kysely` instance) we call: `executeQuery` with a
 * compiled query. Typed structurally so the core does not depend on kysely.
 */
export interface KyselyQueryable {
  executeQuery<R>(query: KyselyCompiledQuery): Promise<{ rows: R[] }>;
  /** `false` on a `Kysely` instance, `true` on a `Transaction`: Kysely's own getter. */
  readonly isTransaction?: boolean;
}

const KYSELY_REASON =
  'fromKysely() was given the Kysely instance, not a transaction: each of its queries commits by itself. Enqueue inside db.transaction().execute(async (trx) => { ... }) on fromKysely(trx).';

/** Shape of Kysely's `CompiledQuery` for a raw statement (what `CompiledQuery.raw` builds). */
export interface KyselyCompiledQuery {
  readonly sql: string;
  readonly parameters: readonly unknown[];
  readonly query: {
    readonly kind: 'RawNode';
    readonly sqlFragments: readonly string[];
    readonly parameters: readonly never[];
  };
  readonly queryId: { readonly queryId: string };
}

let queryCounter = 0;

/**
 * Adapts a Kysely transaction: `db.transaction().execute(async (trx) => enqueue(fromKysely(trx), ...))`.
 * Builds the same object `CompiledQuery.raw(sql, parameters)` would, so plugins and logging see an
 * ordinary raw query.
 */
export function fromKysely(trx: KyselyQueryable): SqlExecutor {
  return {
    // A Transaction (and a ControlledTransaction) says true; the Kysely instance false.
    outsideTransaction: () => (trx.isTransaction === false ? KYSELY_REASON : undefined),
    async query<Row>(text: string, values?: readonly unknown[]) {
      const compiled: KyselyCompiledQuery = {
        sql: text,
        parameters: values ?? [],
        query: { kind: 'RawNode', sqlFragments: [text], parameters: [] },
        queryId: { queryId: `agent-outbox-${++queryCounter}` },
      };
      const result = await trx.executeQuery<Row>(compiled);
      return { rows: result.rows };
    },
  };
}
