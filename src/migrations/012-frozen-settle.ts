// Frozen text of the settle function migration 012 created (released): do not edit.
// Migration 018 re-creates it (delete at settle); see test/unit/sql/cached-plans.test.ts.
export const settleAdvanceFunction012 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_settle_advance(
  p_owner text, p_ids bigint[], p_dead bigint[], p_errors text[], p_lease_ms float8)
RETURNS TABLE (id text, state text)
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
WITH mine AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered
  FROM ${s}.outbox o
  WHERE o.id = ANY(p_ids || p_dead)
    AND o.lease_owner = p_owner
    -- dispatched_at IS NULL, said so that no partial index matches (see the claim's UPDATE).
    AND num_nulls(o.dispatched_at) = 1
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
    FROM ${s}.outbox p
    WHERE p.aggregate_id = t.aggregate_id
      AND p.sequence > t.last
      AND p.dispatched_at IS NULL
      AND p.ordered
    ORDER BY p.sequence
    LIMIT 1
  ) n ON true
),

snap AS MATERIALIZED (
  SELECT a.aggregate_id, a.last_sequence
  FROM ${s}.outbox_aggregates a
  WHERE a.aggregate_id = ANY (ARRAY(SELECT aggregate_id FROM nexts WHERE next_id IS NULL))
),
locked AS MATERIALIZED (
  SELECT a.aggregate_id, a.last_sequence
  FROM ${s}.outbox_aggregates a
  WHERE a.aggregate_id = ANY (ARRAY(SELECT aggregate_id FROM nexts WHERE next_id IS NULL))
  FOR NO KEY UPDATE SKIP LOCKED
),
deferred AS MATERIALIZED (
  SELECT sn.aggregate_id
  FROM snap sn
  LEFT JOIN locked l ON l.aggregate_id = sn.aggregate_id
  WHERE l.aggregate_id IS NULL OR l.last_sequence <> sn.last_sequence
),
bumped AS (
  UPDATE ${s}.outbox_aggregates a
  SET last_sequence = a.last_sequence
  WHERE a.aggregate_id = ANY (ARRAY(
    SELECT aggregate_id FROM locked EXCEPT SELECT aggregate_id FROM deferred))
),
extended AS (
  UPDATE ${s}.outbox o
  SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
  WHERE o.id = ANY (ARRAY(
    SELECT m.id FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id WHERE m.ordered))
),
readied AS (
  UPDATE ${s}.outbox o
  SET ready = true
  WHERE o.id = ANY (ARRAY(SELECT next_id FROM nexts WHERE next_id IS NOT NULL))
    AND NOT o.ready
),
settled AS (
  UPDATE ${s}.outbox o
  SET dispatched_at    = CASE WHEN o.id = ANY(p_dead) THEN NULL ELSE now() END,
      dead_lettered_at = CASE WHEN o.id = ANY(p_dead) THEN now() END,
      last_error       = CASE WHEN o.id = ANY(p_dead)
                              THEN (SELECT k.error
                                    FROM unnest(p_dead, p_errors) AS k(id, error)
                                    WHERE k.id = o.id)
                              ELSE o.last_error END,
      -- A message dead-lettered under skip leaves the chain: it no longer blocks anything.
      ordered          = CASE WHEN o.id = ANY(p_dead) THEN false ELSE o.ordered END,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(
    SELECT m.id FROM mine m
    WHERE m.ordered IS NOT TRUE
       OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))))
    AND o.lease_owner = p_owner
  RETURNING o.id
)
SELECT id::text AS id, 'settled' AS state FROM settled
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
END
$fn$`;
