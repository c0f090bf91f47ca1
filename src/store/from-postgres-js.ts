import type { SqlExecutor } from './sql-executor.js';
import { explainPreparedStatementError } from './prepared-statement-error.js';
import { statementName } from './statement-name.js';
import { postgresJsOutsideTransaction } from './transaction-state.js';

/**
 * The subset of a postgres.js `Sql` (or the `TransactionSql` that `sql.begin` hands you) we call.
 * Typed structurally so the core does not import `postgres`.
 */
export interface PostgresJsQueryable {
  unsafe(
    query: string,
    parameters?: unknown[],
    options?: { prepare?: boolean },
  ): PromiseLike<readonly unknown[]>;
  /** `sql.typed(value, oid)`: a parameter sent as the given type, not the one Postgres infers. */
  typed(value: unknown, oid: number): unknown;
}

/** OID of `text`. */
const TEXT_OID = 25;

/** `$n::json` / `$n::jsonb`: parameters whose value we pass as JSON text. */
const JSON_CAST = /\$(\d+)::jsonb?\b/g;

/**
 * Adapts postgres.js: `sql.begin(async (tx) => outbox.enqueue(fromPostgresJs(tx), message))`.
 * Pass the `tx` of `sql.begin`, not the top-level `sql`, whose queries may run on another
 * connection, outside your transaction: `enqueue()` refuses the top-level `sql` (nothing written;
 * `{ allowAutocommit: true }` for a lone message on purpose). (The consumer runtime's single statements and the
 * dispatcher, which run no transaction of yours, take the top-level `sql`.)
 *
 * Results come back as postgres.js parses them, which is what `fromPg` returns for everything
 * agent-outbox reads: int8 as a string, json/jsonb parsed, timestamptz as a `Date`.
 *
 * Two things differ from `tx.unsafe(text, values)` called bare:
 * - postgres.js asks Postgres for each parameter's type, then runs a json/jsonb parameter
 *   through `JSON.stringify` — which turns the JSON text agent-outbox sends (a whole batch as one
 *   jsonb array, a tool's result) into a JSON *string* scalar. So parameters the statement casts
 *   with `$n::jsonb` (every jsonb parameter agent-outbox sends is cast) go typed as `text`, and
 *   the cast in the statement turns them into jsonb on the server.
 * - `unsafe` prepares nothing by default. The statements `fromPg` prepares (the writer's INSERT;
 *   see statement-name.ts) are run with `prepare: true`, so they are planned once per
 *   connection. A connection created with `postgres({ prepare: false })` (behind PgBouncer in
 *   transaction mode) still prepares nothing: postgres.js lets that setting win.
 *
 * @example
 * ```ts
 * import postgres from 'postgres';
 * const sql = postgres(process.env.DATABASE_URL);
 * await sql.begin(async (tx) => {
 *   const [order] = await tx`INSERT INTO orders (amount) VALUES (${1200}) RETURNING id`;
 *   await outbox.enqueue(fromPostgresJs(tx), {
 *     topic: 'payment.charge',
 *     aggregateId: `order:${order.id}`,
 *     payload: { orderId: order.id },
 *   });
 * });
 * ```
 */
export function fromPostgresJs(tx: PostgresJsQueryable): SqlExecutor {
  return {
    outsideTransaction: () => postgresJsOutsideTransaction(tx),
    async query<Row>(text: string, values?: readonly unknown[]) {
      if (!values || values.length === 0) {
        // No parameters: postgres.js uses the simple protocol, which runs several statements in
        // one string (migrations) and answers one result per statement; keep the last, as psql.
        const result = await tx.unsafe(text);
        const last = Array.isArray(result[0]) ? result[result.length - 1] : result;
        return { rows: [...(last as readonly Row[])] };
      }
      const prepare = statementName(text) !== undefined;
      const result = await Promise.resolve(
        tx.unsafe(text, asJsonText(tx, text, values), prepare ? { prepare } : {}),
      ).catch((error: unknown) => {
        throw prepare
          ? explainPreparedStatementError(
              error,
              'Open postgres.js with postgres(url, { prepare: false })',
            )
          : error;
      });
      return { rows: [...(result as readonly Row[])] };
    },
  };
}

/** `values` with the strings bound to `$n::json(b)` wrapped as text parameters. */
function asJsonText(tx: PostgresJsQueryable, text: string, values: readonly unknown[]): unknown[] {
  const params = [...values];
  for (const match of text.matchAll(JSON_CAST)) {
    const index = Number(match[1]) - 1;
    const value = params[index];
    if (typeof value === 'string') params[index] = tx.typed(value, TEXT_OID);
  }
  return params;
}

/**
 * The subset of a postgres.js `Sql` the transaction runners (`postgresJsTransactions`) call;
 * `Trx` is its `TransactionSql`.
 */
export interface PostgresJsTransactional<Trx extends PostgresJsQueryable> {
  begin<T>(fn: (tx: Trx) => Promise<T>): PromiseLike<unknown>;
}
