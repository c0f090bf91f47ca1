/**
 * The one method agent-outbox needs from a database client: run a statement with positional
 * parameters ($1, $2, ...) and get rows back, json/jsonb parsed. Adapters: `fromPg`, `fromKysely`,
 * `fromPglite`, `fromPostgresJs`, `fromDrizzle`, `fromPrisma`. Any other client fits with a few
 * lines; so does a wrapper around one:
 *
 * @example
 * ```ts
 * // Logs every statement agent-outbox runs on the transaction.
 * const logged = (inner: SqlExecutor): SqlExecutor => ({
 *   query: (text, values) => {
 *     console.debug(text.trim().split('\n')[0]);
 *     return inner.query(text, values);
 *   },
 * });
 * ```
 *
 * The executor must run on the caller's transaction: that is the whole point of the outbox.
 */
export interface SqlExecutor {
  query<Row = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
    options?: QueryOptions,
  ): Promise<{ rows: Row[] }>;
}

/**
 * Per-statement options the dispatcher passes (an executor may ignore them; `fromPg` honours
 * them).
 */
export interface QueryOptions {
  /**
   * Give up on the statement after this many ms: reject it, and drop the connection it ran on
   * (its socket may be dead: a network partition closes nothing, so without this a statement
   * waits for an answer for as long as the operating system keeps the socket — ~15 minutes on
   * Linux, or for good). The statement may still have run on the server; the dispatcher treats
   * a timed-out claim or settle exactly like a failed one (the lease expires, the message goes
   * out again with the same id).
   */
  timeoutMs?: number;
}

/** True when `value` already is a {@link SqlExecutor}. */
export function isSqlExecutor(value: unknown): value is SqlExecutor {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { query?: unknown }).query === 'function'
  );
}
