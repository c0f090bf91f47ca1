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
  /**
   * Optional. Why a write through this executor would commit on its own, in a sentence that says
   * what to pass instead — it runs on a pool, on a connection that is not inside `BEGIN`, on an
   * ORM's top-level object rather than its transaction — or `undefined` when it runs in a
   * transaction or the client cannot tell. Answered from what the client already knows, with no
   * round trip. `enqueue()` refuses an executor that gives a reason (`OutboxAutocommitError`,
   * nothing written) unless called with `{ allowAutocommit: true }`; everything else (the
   * dispatcher, migrations, admin calls) runs its own statements and ignores it.
   */
  outsideTransaction?(): string | undefined;
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

/** Appended to every {@link SqlExecutor.outsideTransaction} reason by the writer. */
export const AUTOCOMMIT_OPT_IN =
  "To write a lone message that commits by itself on purpose, pass { allowAutocommit: true } as enqueue()'s third argument.";

/** True when `value` already is a {@link SqlExecutor}. */
export function isSqlExecutor(value: unknown): value is SqlExecutor {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { query?: unknown }).query === 'function'
  );
}
