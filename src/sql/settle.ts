import { ASYNC_COMMIT_PREDICATE, commitModeClause, type CommitMode } from './commit-mode.js';
import { batchLogSql, batchTables, RING_SLOTS } from './dispatched-log.js';
import { emptiedAggregatesCtes } from './emptied-aggregates.js';
import { aggregateLockSql, writersLockSql } from './lane.js';

/**
 * Settles the messages that leave their aggregate's chain — published, shadow (settled without
 * publishing), and ordered messages dead-lettered under the `skip` policy — and marks the
 * aggregate's next message ready (migration 009). Fenced by `lease_owner = $1` like
 * `settleFailedSql`. Returns each row as `settled` or `deferred`. Published and shadow rows are
 * DELETEd from the outbox and appended, whole, to the dispatched ring's current slot in the same
 * statement (migration 018, dispatched-log.ts: a delete record instead of a non-HOT update, and
 * nothing left for retention to delete), as one compressed batch row per run of ids (migration
 * 021); dead-lettered ones stay, updated.
 *
 * The race it closes. A writer decides in the insert trigger whether its message is the head
 * ("nothing ordered of this aggregate pending?"). A settle that finishes an aggregate's last
 * visible pending message marks nobody ready. If a writer inserts a message while that settle
 * runs, each can miss the other: the writer sees the head still pending (not ready), the settle
 * does not see the new row yet (nothing to mark) — and the new message would never be claimed.
 * Two guards close it; both DEFER an aggregate that a run would leave with NO visible successor
 * while a writer of it is in progress — its rows stay leased (the lease is extended) and
 * untouched, and the dispatcher settles them again a moment later, when the writer's row is
 * committed and visible (`deferred`):
 *
 * - Since migration 020, under READ COMMITTED (a dispatcher's settle): the aggregate's advisory
 *   lock, tried before the statement ({@link settleGuardSql}, which says why it is enough).
 *   Nothing is written for it.
 * - In a REPEATABLE READ or SERIALIZABLE transaction, where the statement cannot see past the
 *   transaction's snapshot (and the rejection of a held message, approvals.ts, the same way): the
 *   counter row, FOR NO KEY UPDATE SKIP LOCKED, which conflicts with the writer's lock on it
 *   (emptied-aggregates.ts). A writer holds it: defer. A writer committed between this
 *   statement's snapshot and the lock (the row locked is newer than the one in the snapshot):
 *   the new message is invisible here, defer too. Otherwise settle, and UPDATE the counter row
 *   (to itself) so that a REPEATABLE READ writer whose snapshot predates this settle fails with a
 *   serialization error and retries instead of deciding on a stale view; a READ COMMITTED writer
 *   waits for this commit and then sees it. That lock and update were ~122 WAL bytes for every
 *   message that emptied its aggregate (bench `wal_per_message_ratio`, 0.83 → 0.74).
 *
 * When a successor IS visible there is nothing to race with (a writer sees it pending): nothing
 * is deferred, so a hot aggregate with writers active keeps moving.
 *
 * Deferring cannot lose anything: nothing changed, and a dispatcher that dies meanwhile leaves
 * leases that expire (the messages go out again, as after any crash before a settle).
 *
 * Plan: every CTE starts from the ids as an array (`= ANY`), and the rows to mark ready are passed
 * as `ARRAY(SELECT ...)`, so each UPDATE walks the primary key whatever the planner estimates for
 * the CTEs. A join of the outbox with a CTE or with jsonb records planned sequential scans of the
 * whole outbox on tables up to ~100k rows, or rescanned the array per row next to 5,000,000 rows
 * (docs/latency.md).
 *
 * It runs as a function (migration 011, `outbox_settle_advance`), called by
 * {@link settleAdvanceSql}: planning this statement was half its cost (a ~4 KB statement of eleven
 * CTEs: 0.28 ms planning, 0.17 ms execution for one message), and the dispatcher waits for one
 * settle before it hands off the next batch, so notify latency paid it per message. PL/pgSQL keeps
 * the plan per session. The danger of a cached plan here was measured before (statement-name.ts):
 * a generic plan made while the outbox was small was a sequential scan, kept while the table
 * grew. The function is declared `SET enable_seqscan = off`, so no plan it caches scans the
 * outbox, whatever its size when the plan was made (as the insert trigger since migration 009).
 * Measured, one message whose aggregate empties (the notify bench's shape), p50 client-side:
 * statement 1.9–3.0 ms, same statement prepared 1.1–1.8 ms, function 0.85–1.37 ms.
 *
 * Changing this text changes the function only through a migration: add one that re-creates it
 * (`settleAdvanceFunctionSql`, CREATE OR REPLACE) — the schema snapshot test fails until then,
 * and test/unit/sql/cached-plans.test.ts pins the text.
 */
const settleAdvanceQuery = (
  schema: string,
  p: {
    owner: string;
    ids: string;
    dead: string;
    errors: string;
    leaseMs: string;
    log: string;
    /**
     * `advisory`: the rows were read before the statement (`v_mine_*`) and the aggregates a writer
     * holds are in `v_busy` ({@link settleGuardSql}); `counter`: the guard on the counter row.
     */
    guard: 'advisory' | 'counter';
  },
) => `
WITH mine AS MATERIALIZED (${
  p.guard === 'advisory'
    ? `
  SELECT m.id, m.aggregate_id, m.sequence, m.ordered
  FROM unnest(v_mine_id, v_mine_aggregate, v_mine_sequence, v_mine_ordered)
         AS m(id, aggregate_id, sequence, ordered)`
    : `
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered
  FROM ${schema}.outbox o
  WHERE o.id = ANY(${p.ids} || ${p.dead})
    AND o.lease_owner = ${p.owner}
    -- dispatched_at IS NULL, said so that no partial index matches (see the claim's UPDATE).
    AND num_nulls(o.dispatched_at) = 1`
}
),
tails AS (
  SELECT aggregate_id, max(sequence) AS last
  FROM mine
  WHERE ordered
  GROUP BY aggregate_id
),
nexts AS MATERIALIZED (
  SELECT t.aggregate_id, n.id AS next_id
  FROM tails t
  LEFT JOIN LATERAL (
    SELECT p.id
    FROM ${schema}.outbox p
    WHERE p.aggregate_id = t.aggregate_id
      AND p.sequence > t.last
      AND p.dispatched_at IS NULL
      AND p.ordered
    ORDER BY p.sequence
    LIMIT 1
  ) n ON true
),
${
  p.guard === 'advisory'
    ? `deferred AS MATERIALIZED (
  SELECT aggregate_id FROM nexts WHERE next_id IS NULL AND aggregate_id = ANY (v_busy)
),`
    : `${emptiedAggregatesCtes(schema, 'SELECT aggregate_id FROM nexts WHERE next_id IS NULL')},
bumped AS (
  UPDATE ${schema}.outbox_aggregates a
  SET last_sequence = a.last_sequence
  WHERE a.aggregate_id = ANY (ARRAY(
    SELECT aggregate_id FROM locked EXCEPT SELECT aggregate_id FROM deferred))
),`
}
extended AS (
  UPDATE ${schema}.outbox o
  SET lease_expires_at = now() + ${p.leaseMs} * interval '1 millisecond'
  WHERE o.id = ANY (ARRAY(
    SELECT m.id FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id WHERE m.ordered))
),
readied AS (
  UPDATE ${schema}.outbox o
  SET ready = true
  WHERE o.id = ANY (ARRAY(SELECT next_id FROM nexts WHERE next_id IS NOT NULL))
    AND NOT o.ready
),
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${schema}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(${p.dead}, ${p.errors}) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(${p.dead})))
    AND o.lease_owner = ${p.owner}
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, a batch row for all of them, and nothing
-- for retention to delete.
moved AS (
  DELETE FROM ${schema}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(${p.dead})))
    AND o.lease_owner = ${p.owner}
  RETURNING o.*
),
logged AS (
  ${batchLogSql(schema, p.log)}
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered`;

/**
 * The function of {@link settleAdvanceQuery} (migration 011). `#variable_conflict use_column`:
 * its result columns are named `id` and `state`, like the outbox's `id`, and in the query a bare
 * name means the column.
 */
export const settleAdvanceFunctionSql = (schema: string) => {
  const query = (table: string, guard: 'advisory' | 'counter') =>
    settleAdvanceQuery(schema, {
      owner: 'p_owner',
      ids: 'p_ids',
      dead: 'p_dead',
      errors: 'p_errors',
      leaseMs: 'p_lease_ms',
      log: table,
      guard,
    });
  return `
CREATE OR REPLACE FUNCTION ${schema}.outbox_settle_advance(
  p_owner text, p_ids bigint[], p_dead bigint[], p_errors text[], p_lease_ms float8)
RETURNS TABLE (id text, state text)
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
  v_slot smallint;
  v_busy text[] := '{}';
  v_mine_id bigint[];
  v_mine_aggregate text[];
  v_mine_sequence bigint[];
  v_mine_ordered boolean[];
  v_fresh boolean := current_setting('transaction_isolation') = 'read committed';
  v_plain boolean := false;
BEGIN
  -- The ring's current table (dispatched-log.ts). One statement per table, so that each keeps a
  -- cached plan of its own; a rotation committed meanwhile only means this settle writes the
  -- table that was current when it started, which retention re-checks before emptying it.
  SELECT r.slot INTO v_slot FROM ${schema}.outbox_dispatched_ring r;
  -- The guard (settleGuardSql): only where the settle's statement gets a snapshot of its own,
  -- taken after these locks. Called in a REPEATABLE READ or SERIALIZABLE transaction, the
  -- transaction's snapshot predates them, and the guard on the counter row does the work.
  IF v_fresh THEN
${settleGuardSql(schema)}
  END IF;
${batchTables(schema)
  .flatMap((table, k) => [
    `  ${k === 0 ? 'IF' : 'ELSIF'} v_slot = ${k} AND v_fresh AND v_plain THEN
    RETURN QUERY${plainSettleQuery(schema, table)};`,
    `  ELSIF v_slot = ${k} AND v_fresh THEN
    RETURN QUERY${query(table, 'advisory')};`,
    `  ELSIF v_slot = ${k} THEN
    RETURN QUERY${query(table, 'counter')};`,
  ])
  .join('\n')}
  ELSE
    RAISE EXCEPTION 'agent-outbox: outbox_dispatched_ring.slot is %, expected 0 to ${RING_SLOTS - 1}', v_slot;
  END IF;
END
$fn$`;
};

/**
 * The settle of a batch with nothing ordered in it (migration 020): the rows read by
 * {@link settleGuardSql} leave the outbox for the ring, and that is all. The statement of
 * {@link settleAdvanceQuery} does the same for them, through ten CTEs that find nothing to do:
 * a settle of 200 unordered messages took 3.37 ms (median, p25 2.71) with this one against 4.12
 * (p25 3.30) with that one, in alternated blocks beside 100,000 pending (2026-12-03). A drain
 * overlaps its settles with its claims, so the drain's rate gains less than that.
 */
const plainSettleQuery = (schema: string, log: string) => `
WITH moved AS (
  DELETE FROM ${schema}.outbox o
  WHERE o.id = ANY (v_mine_id)
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  ${batchLogSql(schema, log)}
)
SELECT id::text, 'settled' FROM moved`;

/**
 * The guard of the settle since migration 020, two statements before the settle's own: read the
 * batch's rows (`v_mine_*`: the statement's `mine` then comes from these arrays, so the rows are
 * read once, as before), then try the advisory lock of every ordered aggregate among them
 * (`aggregateLockSql`, lane.ts); `v_busy` gets those a writer holds. Every ordered aggregate of
 * the batch, not only those the settle will leave empty: which ones those are is known only in a
 * snapshot taken after the locks. A writer takes the same lock in the insert trigger when its
 * message is behind a pending one (a message that is the head at once has nothing to miss), then
 * asks again, and keeps the lock to its commit. Then:
 * - a writer holds it (mid-transaction): its aggregate is in `v_busy`, and the statement defers
 *   the aggregate if it would leave it empty (`deferred`), as the counter-row guard did;
 * - a writer committed before the lock was taken: the statement's snapshot, taken after the lock,
 *   sees its message, which is the successor to mark ready;
 * - a writer comes after: it waits in its trigger for this settle to commit, and asks again (a
 *   fresh snapshot under READ COMMITTED): the settled message is gone, its message is the head. A
 *   REPEATABLE READ or SERIALIZABLE writer cannot see that; the trigger locks what its probe found
 *   pending (FOR KEY SHARE), which fails to serialise on a row deleted since its snapshot.
 * A transaction that wrote behind pending messages of more aggregates than lane.ts
 * `GUARDED_AGGREGATES_CAP` holds the writers' lock instead (`writersLockSql`); a settle that
 * cannot take it shared counts every aggregate of its batch busy.
 * Advisory locks live in memory: the counter-row guard wrote a row lock (~54 WAL bytes) and an
 * update of the counter row (~68) for each message that emptied its aggregate, and left a dead
 * counter version for every one under a held snapshot. Never waits: a settle cannot block on a
 * writer (`pg_try_advisory_xact_lock`); a writer waits for a settle of its aggregate at most as
 * long as that statement runs. Two aggregates whose keys collide only defer or wait for each
 * other now and then.
 */
const settleGuardSql = (
  schema: string,
) => `    SELECT coalesce(array_agg(o.id), '{}'), coalesce(array_agg(o.aggregate_id), '{}'),
           coalesce(array_agg(o.sequence), '{}'), coalesce(array_agg(o.ordered), '{}')
    INTO v_mine_id, v_mine_aggregate, v_mine_sequence, v_mine_ordered
    FROM ${schema}.outbox o
    WHERE o.id = ANY (p_ids || p_dead)
      AND o.lease_owner = p_owner
      -- dispatched_at IS NULL, said so that no partial index matches (see the claim's UPDATE).
      AND num_nulls(o.dispatched_at) = 1;
    -- Nothing ordered and nothing dead-lettered: no chain to move on, no race to guard.
    v_plain := NOT (true = ANY (v_mine_ordered)) AND cardinality(p_dead) = 0;
    IF NOT v_plain THEN
      IF ${writersLockSql('try')} THEN
        SELECT coalesce(array_agg(b.aggregate_id), '{}') INTO v_busy
        FROM (
          SELECT DISTINCT m.aggregate_id
          FROM unnest(v_mine_aggregate, v_mine_ordered) AS m(aggregate_id, ordered)
          WHERE m.ordered
        ) b
        -- Not pushed into the subquery (volatile): one try per aggregate.
        WHERE NOT ${aggregateLockSql('b.aggregate_id', 'try')};
      ELSE
        -- A writer past the cap of aggregates' locks (lane.ts writersLockSql): any of them.
        v_busy := v_mine_aggregate;
      END IF;
    END IF;`;

/**
 * Calls the settle (see {@link settleAdvanceQuery}). With `async` commit the predicate goes on the
 * call: it is evaluated once, before the function runs (commit-mode.ts).
 *
 * $1 lease owner token, $2 ids of published and shadow rows (bigint[]), $3 ids of ordered rows
 * dead-lettered under `skip` (bigint[]), $4 their errors (text[], same order), $5 lease in
 * milliseconds (for deferred rows).
 */
export const settleAdvanceSql = (schema: string, commit: CommitMode = 'sync') =>
  `SELECT id, state
FROM ${schema}.outbox_settle_advance($1, $2::bigint[], $3::bigint[], $4::text[], $5::float8)${
    commit === 'async' ? `\nWHERE ${ASYNC_COMMIT_PREDICATE}` : ''
  }`;

/**
 * Settles the messages that failed, in ONE statement (the ones that went out take
 * `settleAdvanceSql`): retried rows get their next `available_at`, rows dead-lettered under `hold` (and
 * unordered ones) `dead_lettered_at`, both
 * `last_error`, and every row's lease is cleared. The per-row decisions travel as one jsonb
 * parameter (see insert-messages.ts for why jsonb rather than arrays).
 *
 * Fencing: `WHERE lease_owner = $1`. The owner is unique per claim, so if our lease expired and
 * another dispatcher re-claimed the row, this statement no longer matches it and changes nothing:
 * the newer claim decides. Rows that were not re-claimed are still ours to settle even after
 * expiry — the publish did happen. The statement returns the ids it settled so the dispatcher can
 * count fenced-off rows.
 *
 * Plan: the ids travel twice ($2 and $3) on purpose: `unnest` of a constant array is estimated
 * at its length, which the planner cannot know of jsonb_to_recordset (it assumes 100) — without it
 * a small batch on a table up to ~100k rows was planned as a sequential scan of the outbox. Next
 * to millions of rows the planner can still choose to rescan the array per row (see
 * `settleAdvanceSql`), which is why only failed messages, normally few, go through this statement.
 * Not prepared (statement-name.ts): a generic plan made while the table is tiny could be the
 * sequential scan, and it would stay while the table grows.
 *
 * $1 lease owner token, $2 jsonb array of {id, kind: retry|dead, error, delayMs}, $3 the same ids
 * as bigint[].
 */
export const settleFailedSql = (schema: string, commit: CommitMode = 'sync') => `
UPDATE ${schema}.outbox o
SET dead_lettered_at = CASE WHEN s.kind = 'dead' THEN now() ELSE o.dead_lettered_at END,
    -- The message stays (retry) or blocks (dead under hold) at the head of its chain: the claim
    -- must find it there once it is due again (or replayed). Unordered rows are ready anyway.
    ready            = true,
    available_at     = CASE WHEN s.kind = 'retry'
                            THEN now() + s."delayMs" * interval '1 millisecond'
                            ELSE o.available_at END,
    last_error       = s.error,
    lease_owner      = NULL,
    lease_expires_at = NULL
FROM jsonb_to_recordset($2::jsonb) AS s(id bigint, kind text, error text, "delayMs" float8),
     unnest($3::bigint[]) AS i(id)
WHERE o.id = i.id
  AND s.id = i.id
  AND o.lease_owner = $1${commitModeClause(commit)}
RETURNING o.id::text AS id`;

/**
 * Gives back leases of messages this claim never started publishing (graceful shutdown, and the
 * rest of an ordered run after its first failure: they stay behind it, unchanged). Never
 * used for messages whose publish may be in flight: that would let another dispatcher publish
 * them concurrently (G3). Attempts are given back too, since no attempt was made.
 */
export const releaseSql = (schema: string, commit: CommitMode = 'sync') => `
UPDATE ${schema}.outbox
SET lease_owner = NULL, lease_expires_at = NULL, attempts = greatest(attempts - 1, 0)
WHERE lease_owner = $1 AND id = ANY($2::bigint[]) AND dispatched_at IS NULL${commitModeClause(commit)}
RETURNING id::text AS id`;
