/**
 * The one method agent-outbox needs from a database client: run a statement with positional
 * parameters ($1, $2, ...) and get rows back. Any client fits with a few lines — see `fromPg`,
 * `fromKysely`, `fromPglite`, or write your own:
 *
 * @example
 * ```ts
 * // postgres.js, inside sql.begin(async (tx) => { ... })
 * const executor: SqlExecutor = {
 *   query: async (text, values) => ({ rows: await tx.unsafe(text, values as any[]) }),
 * };
 * ```
 *
 * The executor must run on the caller's transaction: that is the whole point of the outbox.
 */
export interface SqlExecutor {
  query<Row = Record<string, unknown>>(
    text: string,
    values?: readonly unknown[],
  ): Promise<{ rows: Row[] }>;
}

/** True when `value` already is a {@link SqlExecutor}. */
export function isSqlExecutor(value: unknown): value is SqlExecutor {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { query?: unknown }).query === 'function'
  );
}
