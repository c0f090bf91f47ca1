import type { MysqlQueryable } from './mysql-connection.js';

/**
 * A Drizzle MySQL database or transaction on the `mysql2` driver (`MySql2Database`,
 * `MySqlTransaction`). What we read of it is internal to Drizzle and not in its types: its
 * `session` (set by the constructor of every MySQL database and transaction) and that session's
 * mysql2 `client` (the pool for the database, the connection holding the transaction for a
 * `tx`); so the parameter is any object, checked at run time, and the package does not import
 * `drizzle-orm`. A Drizzle version that moves them is answered with an error saying so.
 */
export type DrizzleMysqlQueryable = object;

const DRIZZLE_REASON =
  'fromDrizzleMysql() was given something without a mysql2 client (is it a Drizzle database on the mysql2 driver?). Enqueue inside db.transaction(async (tx) => { ... }) on fromDrizzleMysql(tx).';

/**
 * Adapts Drizzle on MySQL/MariaDB (`drizzle-orm/mysql2`) for the MySQL writer:
 * `db.transaction(async (tx) => outbox.enqueue(fromDrizzleMysql(tx), message))`.
 *
 * Why the session's client and not `tx.execute()`: `execute` takes Drizzle's `sql` template, and
 * the writer's statements (text with `?` placeholders and their values) can only become one
 * through `sql.raw`, which takes no values. Inside `db.transaction()` Drizzle's session holds the
 * mysql2 connection the transaction runs on, so the writer's statements run on it, in it (they do
 * not pass through Drizzle's logger). Given `db` itself, the client is the pool: each statement
 * would commit by itself, and the writer refuses it from the server's status flags (nothing
 * written), as it refuses a bare mysql2 connection outside a transaction.
 *
 * @example
 * ```ts
 * await db.transaction(async (tx) => {
 *   await tx.insert(orders).values({ id: 'o-1', amount: 1200 });
 *   await outbox.enqueue(fromDrizzleMysql(tx), {
 *     topic: 'payment.charge',
 *     aggregateId: 'order:o-1',
 *     payload: { amount: 1200 },
 *   });
 * });
 * ```
 */
export function fromDrizzleMysql(tx: DrizzleMysqlQueryable): MysqlQueryable {
  const session = (tx as { session?: { client?: unknown } } | undefined)?.session;
  const client = session?.client as Partial<MysqlQueryable> | undefined;
  if (!client || typeof client.query !== 'function') {
    return {
      outsideTransaction: () => DRIZZLE_REASON,
      query: () => Promise.reject(new TypeError(DRIZZLE_REASON)),
    };
  }
  return { query: (sql, values) => client.query!(sql, values) };
}
