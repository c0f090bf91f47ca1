import type { QueryOptions, SqlExecutor } from './sql-executor.js';
import {
  explainPreparedStatementError,
  PREPARED_STATEMENTS_OFF,
} from './prepared-statement-error.js';
import { statementName } from './statement-name.js';
import { pgOutsideTransaction } from './transaction-state.js';

/**
 * The subset of `pg`'s `Client` / `PoolClient` / `Pool` we call. Typed structurally so the core
 * does not import `pg`.
 */
export interface PgQueryable {
  query(
    config:
      | string
      | { name?: string; text: string; values?: unknown[] | undefined; query_timeout?: number },
    values?: unknown[],
  ): Promise<{ rows: unknown[] }>;
}

/** Options of {@link fromPg}. */
export interface FromPgOptions {
  /**
   * Run the statements marked preparable (the writer's INSERT) as named prepared
   * statements, so Postgres parses and plans them once per connection instead of on every call.
   * Default `true`.
   *
   * Planning is most of what a small statement costs: measured here, the writer's INSERT took
   * 1.06 ms per business transaction unnamed and 0.76 ms prepared (bench/, issue 7). Turn it off
   * behind a connection pooler in transaction mode that does not track prepared statements
   * (PgBouncer before 1.21, or 1.21+ with `max_prepared_statements = 0`): there a statement
   * prepared on one server connection is missing on the next, and such a failure is thrown as
   * an `OutboxPoolerError` that says to set this.
   */
  preparedStatements?: boolean;
}

/**
 * Adapts a `pg` client. Pass the client that ran `BEGIN` — not a `Pool`, whose `query` may run on
 * another connection, outside your transaction. (The dispatcher, which runs no transaction of
 * yours, takes `fromPg(pool)`.)
 *
 * `enqueue()` refuses, with nothing written, `fromPg(pool)` and a client that is not inside
 * `BEGIN` (its last ReadyForQuery said idle: `client.getTransactionStatus()`, pg 8.21+); pass
 * `{ allowAutocommit: true }` for a lone message on purpose. A client with queries still in
 * flight (pipeline mode, calls not awaited) cannot tell, and is let through.
 *
 * @example
 * ```ts
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await client.query('INSERT INTO orders ...');
 * await outbox.enqueue(fromPg(client), { topic: 'mail.send', aggregateId: 'order:42', payload: {} });
 * await client.query('COMMIT');
 * ```
 */
export function fromPg(client: PgQueryable, options: FromPgOptions = {}): SqlExecutor {
  const prepare = options.preparedStatements ?? true;
  return {
    outsideTransaction: () => pgOutsideTransaction(client),
    async query<Row>(text: string, values?: readonly unknown[], queryOptions?: QueryOptions) {
      // Only statements with parameters: those already go through the extended protocol (one
      // statement per string), so naming them changes nothing but the caching. A parameterless
      // string may hold several statements (migrations), which only the simple protocol runs.
      // And only those marked preparable: see statement-name.ts for what a generic plan did.
      const name = prepare && values && values.length > 0 ? statementName(text) : undefined;
      const copied = values ? [...values] : undefined;
      // pg's client-side `query_timeout`: the statement is rejected, and a pool whose `query()`
      // ran it drops the connection (`release(error)` destroys the client) instead of handing
      // a possibly dead socket to the next statement. Server-side `statement_timeout` would not
      // help: a frozen network never delivers the statement, nor the server's answer.
      const timeout = queryOptions?.timeoutMs;
      if (name === undefined && !timeout) {
        const result = await client.query(text, copied);
        return { rows: result.rows as Row[] };
      }
      try {
        const result = await client.query({
          ...(name !== undefined && { name }),
          text,
          values: copied,
          ...(timeout ? { query_timeout: timeout } : {}),
        });
        return { rows: result.rows as Row[] };
      } catch (error) {
        throw name === undefined
          ? error
          : explainPreparedStatementError(error, PREPARED_STATEMENTS_OFF('fromPg'));
      }
    },
  };
}
