/**
 * The guard of every statement that may leave an aggregate with no pending ordered message
 * (settle.ts `settleAdvanceSql`, approvals.ts rejections under `skip`): the CTEs `snap`, `locked`
 * and `deferred` for the aggregates `emptied` yields (a SELECT of one `aggregate_id` column).
 *
 * - `locked`: their counter rows, FOR NO KEY UPDATE SKIP LOCKED — skipped while a writer holds one
 *   (mid-transaction), and the LATEST version where one committed after this statement's snapshot;
 * - `snap`: the same rows as the snapshot sees them;
 * - `deferred`: the aggregates a writer holds or changed since the snapshot — their new message
 *   may be invisible here, so the caller must leave them alone and retry.
 *
 * The race this closes, and why the caller then updates the locked counter rows, is explained
 * at `settleAdvanceSql`.
 */
export const emptiedAggregatesCtes = (schema: string, emptied: string) => `
snap AS MATERIALIZED (
  SELECT a.aggregate_id, a.last_sequence
  FROM ${schema}.outbox_aggregates a
  WHERE a.aggregate_id = ANY (ARRAY(${emptied}))
),
locked AS MATERIALIZED (
  SELECT a.aggregate_id, a.last_sequence
  FROM ${schema}.outbox_aggregates a
  WHERE a.aggregate_id = ANY (ARRAY(${emptied}))
  FOR NO KEY UPDATE SKIP LOCKED
),
deferred AS MATERIALIZED (
  SELECT sn.aggregate_id
  FROM snap sn
  LEFT JOIN locked l ON l.aggregate_id = sn.aggregate_id
  WHERE l.aggregate_id IS NULL OR l.last_sequence <> sn.last_sequence
)`;
