/**
 * How the wake source's waiter rows (always) and, with `asyncSettle`, the dispatcher's settles
 * and releases commit. Claims always commit with the server's setting, and producers' and
 * consumers' transactions are the caller's: this concerns bookkeeping that may be lost without
 * breaking a guarantee.
 *
 * `async` appends this predicate to a statement's WHERE clause. `set_config(..., true)` is
 * transaction-local and the statement runs in its own implicit transaction, so the setting holds
 * exactly for that statement's COMMIT and the session is back to its default afterwards (a
 * pooled connection is never left changed; PgBouncer's transaction mode is fine). The scalar
 * subquery is an InitPlan, evaluated once per statement, not per row. When the statement matches
 * no row it never runs — and then there is nothing to commit.
 *
 * Why a settle may skip the WAL flush wait (`asyncSettle`, opt-in): if Postgres crashes, the last
 * few hundred milliseconds of asynchronous commits are lost, and only as a whole — WAL is flushed
 * in order, so what survives is a prefix of the history, never a hole. A lost settle leaves its
 * rows claimed under a lease that expires, and they are published again with the same message
 * id: a duplicate after a crash, which G2/G3 allow. Ordered successors cannot get ahead: message
 * n+1 is claimed only after n's settle is visible, and that claim's synchronous commit flushes
 * the WAL up to and including n's settle. It is opt-in because it measured nothing here (flush
 * ~0.35 ms; notify p95 and drain rate within noise, interleaved runs); it is for slow flushes.
 *
 * Why the claim may not: a claim lost in a crash frees its rows at once, so another dispatcher
 * could publish a message whose first publish is still in flight — two publishes at the same
 * time, which G3 forbids. Measured anyway (bench/, 1,000 msg/s, 2 vCPU): asynchronous claims
 * took notify p95 to ~3–3.8 ms, but the dispatcher then cycled faster in smaller batches and
 * cost producers at 8 clients 20–30% of their throughput (notify_enqueue_ratio 0.70–0.81).
 */
export const ASYNC_COMMIT_PREDICATE = `(SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`;

/** `sync`: the server's synchronous_commit; `async`: the statement's commit skips the flush wait. */
export type CommitMode = 'sync' | 'async';

/** `AND <predicate>` for an asynchronous statement, nothing otherwise. */
export const commitModeClause = (mode: CommitMode) =>
  mode === 'async' ? `\n  AND ${ASYNC_COMMIT_PREDICATE}` : '';
