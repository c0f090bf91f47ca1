import type { SqlExecutor } from './sql-executor.js';
import {
  explainPreparedStatementError,
  PREPARED_STATEMENTS_OFF,
} from './prepared-statement-error.js';
import { statementName } from './statement-name.js';
import { pgOutsideTransaction, postgresJsOutsideTransaction } from './transaction-state.js';

/**
 * The subset of a Drizzle Postgres database or transaction (`PgDatabase`, `PgTransaction`, on
 * any driver) we call: its session, which Drizzle exposes as `db._.session`. Typed structurally
 * so the core does not import `drizzle-orm`.
 */
export interface DrizzleQueryable {
  readonly _: { readonly session: DrizzleSession };
}

/** The subset of Drizzle's `PgSession` we call: what `db.execute()` itself calls. */
export interface DrizzleSession {
  prepareQuery(
    query: { sql: string; params: unknown[] },
    fields: undefined,
    name: string | undefined,
    isResponseInArrayMode: boolean,
  ): { execute(): PromiseLike<unknown> };
}

/** Options of {@link fromDrizzle}. */
export interface FromDrizzleOptions {
  /**
   * Run the statements `fromPg` prepares (the writer's INSERT) as prepared statements, planned
   * once per connection: Drizzle names them on `node-postgres` and has postgres.js prepare them
   * on `postgres-js`. Default `true`; turn it off behind PgBouncer in transaction mode without
   * prepared-statement support, as for `fromPg`. (On `postgres-js`, a client opened with
   * `postgres(url, { prepare: false })` prepares nothing either way.)
   */
  preparedStatements?: boolean;
}

/**
 * Adapts Drizzle: `db.transaction(async (tx) => outbox.enqueue(fromDrizzle(tx), message))`, on the
 * `node-postgres` and `postgres-js` drivers. Pass the `tx` Drizzle hands you, not `db`, whose
 * statements may run on another pooled connection, outside your transaction: `enqueue()` refuses
 * a `db` on a pool, or on a single client not inside `BEGIN` (nothing written;
 * `{ allowAutocommit: true }` for a lone message on purpose).
 *
 * Why the session and not `tx.execute()`: `execute` takes Drizzle's `sql` template, and a
 * statement text with `$1, $2` placeholders can only become one through `sql.raw`, which takes no
 * parameters. The session's `prepareQuery` is what `execute` calls with the compiled text and its
 * parameters, so Drizzle's logger still sees every statement.
 *
 * Rows come back as the driver returns them to Drizzle: int8 as a string and json/jsonb parsed,
 * as `fromPg` gives; timestamps as strings (Drizzle turns the drivers' date parsing off).
 *
 * @example
 * ```ts
 * await db.transaction(async (tx) => {
 *   const [order] = await tx.insert(orders).values({ amount: 1200 }).returning({ id: orders.id });
 *   await outbox.enqueue(fromDrizzle(tx), {
 *     topic: 'payment.charge',
 *     aggregateId: `order:${order.id}`,
 *     payload: { orderId: order.id },
 *   });
 * });
 * ```
 */
export function fromDrizzle(tx: DrizzleQueryable, options: FromDrizzleOptions = {}): SqlExecutor {
  const prepare = options.preparedStatements ?? true;
  return {
    outsideTransaction: () => drizzleOutsideTransaction(tx),
    async query<Row>(text: string, values?: readonly unknown[]) {
      const params = values ? [...values] : [];
      // Named only with parameters, as in fromPg: a parameterless string may hold several
      // statements, which only the simple protocol runs.
      const name = prepare && params.length > 0 ? statementName(text) : undefined;
      const result = await tx._.session
        .prepareQuery({ sql: text, params }, undefined, name, false)
        .execute()
        .then(undefined, (error: unknown) => {
          // On postgres-js, Drizzle hands a named query to postgres.js as `prepare: true`.
          throw name === undefined
            ? error
            : explainPreparedStatementError(error, PREPARED_STATEMENTS_OFF('fromDrizzle'));
        });
      // node-postgres answers pg's QueryResult, postgres-js the row array itself.
      const rows = Array.isArray(result) ? result : (result as { rows?: unknown[] }).rows;
      return { rows: [...((rows ?? []) as Row[])] };
    },
  };
}

const DRIZZLE_REASON =
  'fromDrizzle() was given the Drizzle database, not a transaction, and its driver client is not inside one: each statement commits by itself. Enqueue inside db.transaction(async (tx) => { ... }) on fromDrizzle(tx).';

/**
 * A `PgTransaction` has `rollback()`, the database does not. For the database, its session's
 * driver client decides: a `pg` Pool or the postgres.js top-level `sql` autocommit; a single `pg`
 * client answers from its transaction status (the caller may have run `BEGIN` on it).
 */
function drizzleOutsideTransaction(db: DrizzleQueryable): string | undefined {
  if (typeof (db as { rollback?: unknown }).rollback === 'function') return undefined;
  const client = (db._.session as { client?: unknown }).client;
  return (pgOutsideTransaction(client) ?? postgresJsOutsideTransaction(client))
    ? DRIZZLE_REASON
    : undefined;
}

/**
 * The subset of a Drizzle Postgres database the transaction runners (`drizzleTransactions`)
 * call; `Trx` is its transaction.
 */
export interface DrizzleTransactional<Trx extends DrizzleQueryable> {
  transaction<T>(fn: (tx: Trx) => Promise<T>): Promise<T>;
}
