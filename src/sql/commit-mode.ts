/**
 * How the wake source's waiter rows (always), with `asyncSettle` the dispatcher's settles and
 * releases, and with `asyncClaim` its claims commit. Producers' and consumers' transactions are
 * the caller's: this concerns the dispatcher's own writes, which may be lost in a crash without
 * breaking a guarantee (for claims, only with the restart guard of {@link claimCommitClause}).
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
 * Claims: see {@link claimCommitClause}.
 */
export const ASYNC_COMMIT_PREDICATE = `(SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL`;

/** `sync`: the server's synchronous_commit; `async`: the statement's commit skips the flush wait. */
export type CommitMode = 'sync' | 'async';

/** `AND <predicate>` for an asynchronous statement, nothing otherwise. */
export const commitModeClause = (mode: CommitMode) =>
  mode === 'async' ? `\n  AND ${ASYNC_COMMIT_PREDICATE}` : '';

/**
 * What a claim statement (`SELECT * FROM outbox_claim(...)`) ends with: nothing when claims are
 * synchronous (the default); with `asyncClaim`, a WHERE clause that skips the WAL flush wait of
 * its commit and takes nothing during the first `leaseMs` (`$3`) after Postgres recovered from a
 * crash. Both are one-time filters of the statement (a `Result` node above the function scan):
 * when the guard is false the claim function does not run at all, and nothing is written.
 *
 * Why the guard. A synchronous claim's lease is on disk when the claim returns, so after a crash
 * its rows stay leased until it expires, and the dispatcher that took them stops publishing well
 * before that (claim-loop.ts). An asynchronous claim returns before its WAL is flushed: if
 * Postgres crashes in the next few hundred milliseconds (wal_writer_delay, at most three of them),
 * the lease is lost while its dispatcher may still be publishing, and without a guard the rows
 * would be claimable the moment Postgres is back — a second dispatcher publishing the same
 * message at the same time (G3). Postgres resets its cumulative statistics when it recovers from
 * a crash (not after a clean shutdown, whose checkpoint flushes every commit first), so
 * `pg_stat_get_bgwriter_stat_reset_time()` is the end of the last crash recovery, or an earlier
 * moment. Every lost lease was taken before the crash, so it would have expired by `reset +
 * leaseMs`; until then no async claim takes anything. After that the messages are claimed again
 * and published a second time with the same message id — a duplicate after a crash, which G2/G3
 * allow. Nothing is lost: the messages' rows were committed synchronously by their producers.
 *
 * What it costs: dispatching pauses for `leaseMs` after a crash recovery, after the first start
 * of a new cluster, and after `pg_stat_reset_shared('bgwriter')` (the dispatchers then sleep
 * until the next wake-up or poll). Every dispatcher of one outbox must use the same `leaseMs` and
 * the same `asyncClaim`: a synchronous claim has no guard, and a shorter lease a shorter pause.
 * Not covered, as for synchronous claims without synchronous replication: a failover to a standby
 * that had not received the claim. An unknown reset time (NULL) does not hold claims back.
 *
 * What it buys: the claim's flush is on the path of every message from its commit to its publish.
 * With `asyncSettle` too (bench/ `--only latency`, 1,000 msg/s, a 2-vCPU VM at load 7–12, issue
 * 43), notify p50/p95 from commit returned: 1.94/7.6 ms against graphile-worker's 5.25/14.61
 * (0.37/0.52) and 2.2/8.58 against 3.58/12.7 (0.61/0.68) in two runs; with synchronous claims
 * 6.0–6.7/15.3–18.6 (docs/benchmarks.md). Measured in 2026-11 on an idle machine, asynchronous
 * claims cost producers at 8 clients 20–30 % of their throughput (the dispatcher cycles faster
 * in smaller batches), hence opt-in.
 */
export const claimCommitClause = (mode: CommitMode, leaseMs = '$3::float8') =>
  mode === 'async'
    ? `
WHERE ${ASYNC_COMMIT_PREDICATE}
  AND coalesce(pg_stat_get_bgwriter_stat_reset_time(), '-infinity')
      <= now() - ${leaseMs} * interval '1 millisecond'`
    : '';
