// Frozen text of the insert trigger function migration 012 created (released): do not edit.
// Migration 020 re-creates it (the writer's advisory lock); see test/unit/sql/cached-plans.test.ts.
export const insertTriggerFunction012 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_before_insert() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_prev bigint;
BEGIN
  IF NEW.ordered IS NULL THEN
    NEW.ordered := NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_unordered_topics u WHERE NEW.topic LIKE u.pattern);
  END IF;
  -- Always assigned here, never taken from the INSERT: a caller-chosen sequence could collide.
  -- The counter row stays locked until the writer commits: writers of one aggregate serialise.
  INSERT INTO ${s}.outbox_aggregates AS a (aggregate_id, last_sequence, last_ordered_id)
  VALUES (NEW.aggregate_id, 1, CASE WHEN NEW.ordered THEN NEW.id END)
  ON CONFLICT (aggregate_id) DO UPDATE
    SET last_sequence = a.last_sequence + 1,
        prev_ordered_id = CASE WHEN NEW.ordered THEN a.last_ordered_id ELSE a.prev_ordered_id END,
        last_ordered_id = CASE WHEN NEW.ordered THEN NEW.id ELSE a.last_ordered_id END
  RETURNING a.last_sequence, a.prev_ordered_id INTO NEW.sequence, v_prev;
  NEW.headers := coalesce(NEW.headers, '{}'::jsonb);
  NEW.attempts := coalesce(NEW.attempts, 0);
  IF NEW.ordered THEN
    NEW.prev_id := v_prev;
    -- The head of its aggregate when its predecessor is not pending (this statement runs with a
    -- fresh snapshot, after the counter row was locked: see settle.ts).
    NEW.ready := v_prev IS NULL OR NOT EXISTS (
        SELECT 1
        FROM ${s}.outbox p
        WHERE p.id = v_prev
          -- dispatched_at IS NULL, said so that no partial index matches: with the plain form,
          -- the plan the insert trigger cached on a small outbox scanned the whole of
          -- outbox_aggregate_pending_idx for the id (20,000 messages on one aggregate in one
          -- transaction: 147 s instead of 13), as claim.ts's UPDATE once did.
          AND num_nulls(p.dispatched_at) = 1
          AND (p.ordered OR ${s}.outbox_pending_predecessor(p.prev_id))
      );
  ELSE
    NEW.prev_id := NULL;
    NEW.ready := true;
  END IF;
  IF NEW.ready THEN
    NEW.available_at := greatest(NEW.available_at, clock_timestamp());
  END IF;
  RETURN NEW;
END
$$`;
