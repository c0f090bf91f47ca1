// Frozen text of migration 011 (released): do not edit. See test/unit/sql/cached-plans.test.ts.
export const claimFunction011 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_claim(p_owner text, p_batch int, p_lease_ms float8)
RETURNS TABLE ("rowId" text, id text, topic text, "aggregateId" text, sequence text,
               ordered boolean, payload jsonb, headers jsonb, "createdAt" timestamptz,
               attempts int, shadow boolean)
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
WITH heads AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered
  FROM ${s}.outbox o
  WHERE o.ready
    AND o.dispatched_at IS NULL
    AND o.dead_lettered_at IS NULL
    AND o.available_at <= now()
    AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
    AND (
      o.ordered IS NOT TRUE
      OR NOT EXISTS (
        SELECT 1
        FROM ${s}.outbox p
        WHERE p.aggregate_id = o.aggregate_id
          AND p.sequence < o.sequence
          AND p.dispatched_at IS NULL
          AND p.ordered
      )
    )
  ORDER BY o.available_at, o.id
  LIMIT p_batch
  FOR UPDATE OF o SKIP LOCKED
),
share AS (
  SELECT ((p_batch - count(*)) / greatest(count(*) FILTER (WHERE ordered), 1))::int AS per_run
  FROM heads
),
run AS MATERIALIZED (
  SELECT c.id
  FROM heads h
  CROSS JOIN share
  CROSS JOIN LATERAL (
    SELECT n.id,
           bool_and(n.available_at <= now()
                    AND n.dead_lettered_at IS NULL
                    AND (n.lease_expires_at IS NULL OR n.lease_expires_at <= now()))
             OVER (ORDER BY n.sequence) AS unbroken
    FROM (
      SELECT p.id, p.sequence, p.available_at, p.dead_lettered_at, p.lease_expires_at
      FROM ${s}.outbox p
      WHERE p.aggregate_id = h.aggregate_id
        AND p.sequence > h.sequence
        AND p.dispatched_at IS NULL
        AND p.ordered
      ORDER BY p.sequence
      LIMIT share.per_run
    ) n
  ) c
  WHERE h.ordered AND share.per_run > 0 AND c.unbroken
)
UPDATE ${s}.outbox o
SET lease_owner = p_owner,
    lease_expires_at = now() + p_lease_ms * interval '1 millisecond',
    attempts = o.attempts + 1
WHERE o.id = ANY (ARRAY(SELECT id FROM heads UNION ALL SELECT id FROM run))
  -- dispatched_at and dead_lettered_at both NULL, said so that no partial index ("WHERE
  -- dispatched_at IS NULL") matches: a plan cached on a small outbox then walked the whole of
  -- outbox_aggregate_pending_idx instead of the primary key once the table had grown
  -- (claim-plan.test.ts: 50,427 rows read for 200).
  AND num_nulls(o.dispatched_at, o.dead_lettered_at) = 2
  AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
RETURNING o.id::text AS "rowId",
          o.message_id::text AS id,
          o.topic,
          o.aggregate_id AS "aggregateId",
          o.sequence::text AS sequence,
          o.ordered IS TRUE AS ordered,
          o.payload,
          o.headers,
          o.created_at AS "createdAt",
          o.attempts,
          o.shadow;
END
$fn$`;

export const settleAdvanceFunction011 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_settle_advance(
  p_owner text, p_ids bigint[], p_dead bigint[], p_errors text[], p_lease_ms float8)
RETURNS TABLE (id text, state text)
LANGUAGE plpgsql
SET enable_seqscan = off
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
