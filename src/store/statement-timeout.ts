import type { QueryOptions, SqlExecutor } from './sql-executor.js';

/**
 * `executor` with every statement bounded by `timeoutMs` ({@link QueryOptions.timeoutMs}: the
 * statement is rejected and its connection dropped), unless the caller gives its own. The lanes
 * dispatcher passes no timeout of its own: without this a statement on a connection a network
 * partition froze (nothing closed) waits for good, and so does the process, SIGTERM included
 * (test/chaos/lanes-partition.test.ts), or a fleet tenant's turn and its room in the budget. A
 * timed-out call is a failed one: the dispatcher takes its lanes again from their committed
 * cursors (what it published since goes out again, same id). `0`: the executor as it is.
 */
export function withStatementTimeout(executor: SqlExecutor, timeoutMs: number): SqlExecutor {
  if (!timeoutMs) return executor;
  return {
    query: <Row>(text: string, values?: readonly unknown[], options?: QueryOptions) =>
      executor.query<Row>(text, values, { timeoutMs, ...options }),
  };
}
