import { OutboxPoolerError } from '../core/errors.js';

/**
 * SQLSTATEs of a named prepared statement that is not where the driver left it: 26000
 * (`prepared statement "…" does not exist`: prepared on another server connection) and 42P05
 * (`… already exists`: another client prepared the same name on this one). Both mean the same
 * thing when agent-outbox asked for a named statement: a pooler in transaction mode stands between
 * the client and Postgres and does not carry prepared statements from one server connection to
 * the next (PgBouncer before 1.21, or 1.21+ with `max_prepared_statements = 0`; Supavisor and
 * Neon's `-pooler` in transaction mode). Which call fails depends on which server connection it
 * lands on, so the driver's own error shows up on some calls and not others.
 */
const MISPLACED_STATEMENT = new Set(['26000', '42P05']);

/**
 * `error` unchanged, unless it is a prepared statement lost to a transaction pooler: then an
 * {@link OutboxPoolerError} that says what to set (`fix`), the driver's error as its `cause`.
 * Call it only for statements that were run as named prepared statements: an unnamed statement
 * never meets this error.
 */
export function explainPreparedStatementError(error: unknown, fix: string): unknown {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code !== 'string' || !MISPLACED_STATEMENT.has(code)) return error;
  if (typeof message !== 'string' || !message.startsWith('prepared statement')) return error;
  return new OutboxPoolerError(
    `${message}: a connection pooler in transaction mode (PgBouncer before 1.21, Supavisor on port 6543, Neon's -pooler endpoint) runs each transaction on another server connection and does not carry prepared statements between them. ${fix}, or turn on the pooler's prepared-statement support (PgBouncer 1.21+: max_prepared_statements). See docs/managed-postgres.md`,
    { cause: error },
  );
}

/** The fix {@link explainPreparedStatementError} names for `fromPg` and `fromDrizzle`. */
export const PREPARED_STATEMENTS_OFF = (adapter: string) =>
  `Pass { preparedStatements: false } to ${adapter}()`;
