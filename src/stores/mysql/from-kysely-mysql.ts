import type { KyselyCompiledQuery, KyselyQueryable } from '../../store/from-kysely.js';
import type { MysqlQueryable } from './mysql-connection.js';

const KYSELY_REASON =
  'fromKyselyMysql() was given the Kysely instance, not a transaction: each of its queries commits by itself. Enqueue inside db.transaction().execute(async (trx) => { ... }) on fromKyselyMysql(trx).';

let queryCounter = 0;

/**
 * Adapts a Kysely transaction on MySQL/MariaDB (Kysely's `MysqlDialect`, which runs mysql2's
 * `query`) for the MySQL writer:
 * `db.transaction().execute(async (trx) => outbox.enqueue(fromKyselyMysql(trx), message))`.
 * Kysely's own `isTransaction` says whether the writes would commit by themselves. Builds the
 * object `CompiledQuery.raw(sql, parameters)` would, so plugins and logging see an ordinary raw
 * query; an array parameter expands to a list, as mysql2 does it.
 */
export function fromKyselyMysql(trx: KyselyQueryable): MysqlQueryable {
  return {
    outsideTransaction: () => (trx.isTransaction === false ? KYSELY_REASON : undefined),
    async query(sql: string, values?: unknown) {
      const compiled: KyselyCompiledQuery = {
        sql,
        parameters: (values as readonly unknown[] | undefined) ?? [],
        query: { kind: 'RawNode', sqlFragments: [sql], parameters: [] },
        queryId: { queryId: `agent-outbox-mysql-${++queryCounter}` },
      };
      const result = await trx.executeQuery<unknown>(compiled);
      return [result.rows, undefined];
    },
  };
}
