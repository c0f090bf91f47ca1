// Frozen text of the settle function migration 020 created (released): do not edit.
// Migration 021 re-creates it (settles append to the batched log).
export const settleAdvanceFunction020 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_settle_advance(
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
  SELECT r.slot INTO v_slot FROM ${s}.outbox_dispatched_ring r;
  -- The guard (settleGuardSql): only where the settle's statement gets a snapshot of its own,
  -- taken after these locks. Called in a REPEATABLE READ or SERIALIZABLE transaction, the
  -- transaction's snapshot predates them, and the guard on the counter row does the work.
  IF v_fresh THEN
    SELECT coalesce(array_agg(o.id), '{}'), coalesce(array_agg(o.aggregate_id), '{}'),
           coalesce(array_agg(o.sequence), '{}'), coalesce(array_agg(o.ordered), '{}')
    INTO v_mine_id, v_mine_aggregate, v_mine_sequence, v_mine_ordered
    FROM ${s}.outbox o
    WHERE o.id = ANY (p_ids || p_dead)
      AND o.lease_owner = p_owner
      -- dispatched_at IS NULL, said so that no partial index matches (see the claim's UPDATE).
      AND num_nulls(o.dispatched_at) = 1;
    -- Nothing ordered and nothing dead-lettered: no chain to move on, no race to guard.
    v_plain := NOT (true = ANY (v_mine_ordered)) AND cardinality(p_dead) = 0;
    IF NOT v_plain THEN
      IF pg_try_advisory_xact_lock_shared(1634694517, 0) THEN
        SELECT coalesce(array_agg(b.aggregate_id), '{}') INTO v_busy
        FROM (
          SELECT DISTINCT m.aggregate_id
          FROM unnest(v_mine_aggregate, v_mine_ordered) AS m(aggregate_id, ordered)
          WHERE m.ordered
        ) b
        -- Not pushed into the subquery (volatile): one try per aggregate.
        WHERE NOT pg_try_advisory_xact_lock(1634694516, hashtext(b.aggregate_id));
      ELSE
        -- A writer past the cap of aggregates' locks (lane.ts writersLockSql): any of them.
        v_busy := v_mine_aggregate;
      END IF;
    END IF;
  END IF;
  IF v_slot = 0 AND v_fresh AND v_plain THEN
    RETURN QUERY
WITH moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (v_mine_id)
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_0 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text, 'settled' FROM moved;
  ELSIF v_slot = 0 AND v_fresh THEN
    RETURN QUERY
WITH mine AS MATERIALIZED (
  SELECT m.id, m.aggregate_id, m.sequence, m.ordered
  FROM unnest(v_mine_id, v_mine_aggregate, v_mine_sequence, v_mine_ordered)
         AS m(id, aggregate_id, sequence, ordered)
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
deferred AS MATERIALIZED (
  SELECT aggregate_id FROM nexts WHERE next_id IS NULL AND aggregate_id = ANY (v_busy)
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
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${s}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(p_dead, p_errors) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, and nothing for retention to delete.
moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_0 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
  ELSIF v_slot = 0 THEN
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
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${s}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(p_dead, p_errors) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, and nothing for retention to delete.
moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_0 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
  ELSIF v_slot = 1 AND v_fresh AND v_plain THEN
    RETURN QUERY
WITH moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (v_mine_id)
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_1 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text, 'settled' FROM moved;
  ELSIF v_slot = 1 AND v_fresh THEN
    RETURN QUERY
WITH mine AS MATERIALIZED (
  SELECT m.id, m.aggregate_id, m.sequence, m.ordered
  FROM unnest(v_mine_id, v_mine_aggregate, v_mine_sequence, v_mine_ordered)
         AS m(id, aggregate_id, sequence, ordered)
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
deferred AS MATERIALIZED (
  SELECT aggregate_id FROM nexts WHERE next_id IS NULL AND aggregate_id = ANY (v_busy)
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
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${s}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(p_dead, p_errors) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, and nothing for retention to delete.
moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_1 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
  ELSIF v_slot = 1 THEN
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
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${s}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(p_dead, p_errors) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, and nothing for retention to delete.
moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_1 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
  ELSIF v_slot = 2 AND v_fresh AND v_plain THEN
    RETURN QUERY
WITH moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (v_mine_id)
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_2 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text, 'settled' FROM moved;
  ELSIF v_slot = 2 AND v_fresh THEN
    RETURN QUERY
WITH mine AS MATERIALIZED (
  SELECT m.id, m.aggregate_id, m.sequence, m.ordered
  FROM unnest(v_mine_id, v_mine_aggregate, v_mine_sequence, v_mine_ordered)
         AS m(id, aggregate_id, sequence, ordered)
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
deferred AS MATERIALIZED (
  SELECT aggregate_id FROM nexts WHERE next_id IS NULL AND aggregate_id = ANY (v_busy)
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
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${s}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(p_dead, p_errors) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, and nothing for retention to delete.
moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_2 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
  ELSIF v_slot = 2 THEN
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
settling AS MATERIALIZED (
  SELECT m.id FROM mine m
  WHERE m.ordered IS NOT TRUE
     OR m.aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))
),
-- Ordered messages dead-lettered under skip stay in the outbox, out of the chain: they no longer
-- block anything.
dead AS (
  UPDATE ${s}.outbox o
  SET dead_lettered_at = now(),
      last_error       = (SELECT k.error
                          FROM unnest(p_dead, p_errors) AS k(id, error)
                          WHERE k.id = o.id),
      ordered          = false,
      lease_owner      = NULL,
      lease_expires_at = NULL
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id = ANY(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.id
),
-- Published (and shadow) messages leave the outbox for the dispatched log (dispatched-log.ts):
-- one small delete record instead of a non-HOT update, and nothing for retention to delete.
moved AS (
  DELETE FROM ${s}.outbox o
  WHERE o.id = ANY (ARRAY(SELECT id FROM settling WHERE id <> ALL(p_dead)))
    AND o.lease_owner = p_owner
  RETURNING o.*
),
logged AS (
  INSERT INTO ${s}.outbox_dispatched_2 (id, message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, last_error, lease_owner, lease_expires_at, dead_lettered_at, shadow, ordered, ready, approval_state, approval_expires_at, approval_available_at, approval_requested_by, approval_decided_by, approval_decided_at, approval_note, prev_id, dedupe_key, dedupe_expires_at, approval_on_expiry)
  SELECT o.id, o.message_id, o.aggregate_id, o.topic, o.payload, o.headers, o.sequence, o.created_at, o.available_at, now(), o.attempts, o.last_error, NULL, NULL, o.dead_lettered_at, o.shadow, o.ordered, false, o.approval_state, o.approval_expires_at, o.approval_available_at, o.approval_requested_by, o.approval_decided_by, o.approval_decided_at, o.approval_note, o.prev_id, o.dedupe_key, o.dedupe_expires_at, o.approval_on_expiry FROM moved o
)
SELECT id::text AS id, 'settled' AS state FROM dead
UNION ALL
SELECT id::text, 'settled' FROM moved
UNION ALL
SELECT m.id::text, 'deferred'
FROM mine m JOIN deferred d ON d.aggregate_id = m.aggregate_id
WHERE m.ordered;
  ELSE
    RAISE EXCEPTION 'agent-outbox: outbox_dispatched_ring.slot is %, expected 0 to 2', v_slot;
  END IF;
END
$fn$`;
