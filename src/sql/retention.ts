/**
 * Retention of dispatched outbox rows (SPEC §4.9). Each statement below is ONE batch and runs in
 * its own transaction (autocommit), so locks are held for one batch only and a crash loses at
 * most the batch in flight (which then simply did not happen).
 *
 * Which rows: `dispatched_at IS NOT NULL AND dead_lettered_at IS NULL`. A pending row has no
 * `dispatched_at`; a dead letter has no `dispatched_at` either (settling a dead letter leaves it
 * NULL) — the second condition states the rule where a reader looks for it and holds should a
 * future change set both.
 *
 * How: `ORDER BY dispatched_at LIMIT $2` over `outbox_dispatched_at_idx` (migration 006), so a
 * batch costs its size, not the table's. The DELETE repeats the batch's conditions: under READ
 * COMMITTED a row changed or deleted since the batch was read is re-checked on its latest version
 * (deleted by another pruner: skipped; no longer dispatched: kept), so the batch needs no lock of
 * its own. `= ANY (ARRAY(...))` keeps the DELETE a walk of the primary key: joined to the batch,
 * the repeated conditions let the planner consider every old row of `outbox_dispatched_at_idx`.
 * Tried and rejected: one unbounded DELETE (a long lock, a WAL burst and a bloated table on a big
 * outbox); a keyset walk over the primary key (the last batch scans every retained row to find
 * out it is done); `DELETE ... LIMIT` (not Postgres syntax); `FOR UPDATE SKIP LOCKED` on the
 * batch (until issue 25): it let two pruners run without waiting on each other, but each row
 * lock is a WAL record of its own before the delete's — 54 of the 323 bytes per message that
 * retention wrote (`npm run bench -- --only wal`). Two pruners now wait for each other's batch
 * (milliseconds), and the one that finds its batch taken stops; retention-job.ts runs one batch
 * per schema at a time anyway (its transaction-scoped advisory lock).
 *
 * $1 age cut-off in ms, $2 batch size. Returns the number of rows in the batch: fewer than $2
 * means the backlog of old rows is exhausted.
 */
export const pruneDispatchedBatchSql = (s: string) => `
WITH batch AS (
  SELECT id FROM ${s}.outbox
   WHERE dispatched_at IS NOT NULL
     AND dispatched_at < now() - $1::float8 * interval '1 millisecond'
     AND dead_lettered_at IS NULL
   ORDER BY dispatched_at
   LIMIT $2
), gone AS (
  DELETE FROM ${s}.outbox o
   WHERE o.id = ANY (ARRAY(SELECT id FROM batch))
     AND o.dispatched_at < now() - $1::float8 * interval '1 millisecond'
     AND o.dead_lettered_at IS NULL
  RETURNING 1
)
SELECT count(*)::int AS n FROM gone`;

/**
 * The same batch, moved instead of deleted: the DELETE's RETURNING feeds the INSERT in the same
 * statement, so a row is either still in `outbox` or already in `outbox_archive`, never in both
 * or neither. Columns are listed explicitly so a column added to `outbox` later cannot shift
 * values into the wrong archive column; an approved message keeps its approval's audit trail
 * (migration 010), its dedupe key and deadline policy (migration 017). `ON CONFLICT DO NOTHING` keeps a re-archived id (a row
 * restored by hand and archived again) from failing the whole batch.
 */
export const archiveDispatchedBatchSql = (s: string) => `
WITH batch AS (
  SELECT id FROM ${s}.outbox
   WHERE dispatched_at IS NOT NULL
     AND dispatched_at < now() - $1::float8 * interval '1 millisecond'
     AND dead_lettered_at IS NULL
   ORDER BY dispatched_at
   LIMIT $2
), gone AS (
  DELETE FROM ${s}.outbox o
   WHERE o.id = ANY (ARRAY(SELECT id FROM batch))
     AND o.dispatched_at < now() - $1::float8 * interval '1 millisecond'
     AND o.dead_lettered_at IS NULL
  RETURNING o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence,
            o.created_at, o.available_at, o.dispatched_at, o.attempts, o.last_error, o.shadow,
            o.approval_state, o.approval_requested_by, o.approval_decided_by,
            o.approval_decided_at, o.approval_note, o.dedupe_key, o.approval_expires_at,
            o.approval_on_expiry
), moved AS (
  INSERT INTO ${s}.outbox_archive
    (id, message_id, aggregate_id, topic, payload, headers, sequence,
     created_at, available_at, dispatched_at, attempts, last_error, shadow,
     approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
     approval_note, dedupe_key, approval_expires_at, approval_on_expiry)
  SELECT * FROM gone
  ON CONFLICT (id) DO NOTHING
  RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::int AS n`;

/**
 * Dry run: how many dispatched rows a prune would take now. An index-only count over
 * `outbox_dispatched_at_idx`; it reads every old row's index entry once, which is what the
 * operator asked to see.
 */
export const countPrunableSql = (s: string) => `
SELECT count(*)::int AS n, min(dispatched_at) AS oldest
FROM ${s}.outbox
WHERE dispatched_at IS NOT NULL
  AND dispatched_at < now() - $1::float8 * interval '1 millisecond'
  AND dead_lettered_at IS NULL`;

/** Dry run of ledger pruning: the rows `pruneLedger` would delete (done rows only). */
export const countPrunableLedgerSql = (s: string) => `
SELECT count(*)::int AS n
FROM ${s}.processed_messages
WHERE state = 'done'
  AND processed_at < now() - $1::float8 * interval '1 millisecond'`;

/**
 * One retention batch at a time per schema, across processes and hosts: each batch runs in its
 * own transaction that first takes this lock (retention-job.ts). Transaction-scoped, not
 * session-scoped: a run spans many transactions, and a session lock held across them stays with
 * whatever server connection a transaction pooler (PgBouncer, Supavisor, RDS Proxy, Neon's
 * `-pooler`) ran the locking statement on — that connection goes back to the pool still holding
 * it, every later run finds it taken, and retention stops for good (issue 41). A transaction lock
 * ends with its transaction whatever the pooler does with the connection. A `try`: the runner that
 * finds it taken stops, it does not queue behind the other. It conflicts with the session lock of
 * the same keys, so a process of an earlier version still running during an upgrade is excluded
 * too. The key pairs a constant with the schema, like the migrator's lock, but a different
 * constant: a prune must not wait for a migration, nor the other way round.
 */
export const tryRetentionLockSql = `SELECT pg_try_advisory_xact_lock(hashtext('agent-outbox:retention'), hashtext($1)) AS locked`;
