// The functions of migration 025 that later migrations replaced (`outbox_lane_next`: 026;
// `outbox_lane_settle_parked`: 033), as 025 created them: migrations are append-only
// (src/sql/lanes.ts holds the current texts).

/** `outbox_lane_next` as migration 025 created it. */
export const laneNextFunction025 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_lane_next(
  p_owner text, p_lanes smallint[], p_from bigint[], p_to bigint[],
  p_park_lanes smallint[], p_park_ids bigint[], p_park_kinds text[], p_park_errors text[],
  p_park_delay_ms float8[], p_dead_blocks boolean,
  p_batch integer, p_start smallint, p_lease_ms integer,
  p_safe bigint, p_pair_id bigint, p_pair_xid bigint, p_async boolean,
  p_read_lanes smallint[], p_read_after bigint[])
RETURNS TABLE (lane smallint, id bigint, message_id uuid, aggregate_id text, sequence bigint,
               ordered boolean, topic text, payload jsonb, headers jsonb, created_ms float8)
-- Every read here walks a lane's primary key from its cursor, in id order, and stops at its
-- LIMIT. Measured: for a lane with a deep parked aggregate the planner chose a bitmap scan of
-- the whole lane and a sort (5,000 rows read for a batch); the settings keep it to the walk.
LANGUAGE plpgsql SET jit = off SET enable_bitmapscan = off SET enable_seqscan = off AS $$
#variable_conflict use_column
DECLARE
  v_moved integer;
  v_horizon record;
  v_lane record;
  v_left integer := p_batch;
  v_n integer;
  v_any_blocked boolean;
  v_row record;
  v_seen integer;
  v_upto bigint;
  v_end constant bigint := 9223372036854775807;
BEGIN
  IF p_batch > 0 THEN
    SELECT * INTO v_horizon FROM ${s}.outbox_lane_horizon(p_safe, p_pair_id, p_pair_xid);
  END IF;
  IF cardinality(p_lanes) > 0 THEN
    -- p_async (opt-in, as the claim engine's asyncSettle): a call that only moves cursors commits
    -- without waiting for the WAL flush. Lost in a crash, the moves only make messages published
    -- again, in order (what survives of the WAL is a prefix). A call that parks a failure or
    -- renews a lease always waits: a failure is not forgotten, a lease is not lost.
    IF p_async AND cardinality(p_park_ids) = 0 AND NOT EXISTS (
         SELECT 1 FROM ${s}.outbox_lanes l WHERE l.lane = ANY (p_lanes)
           AND l.lease_expires_at < now() + (p_lease_ms * 2 / 3) * interval '1 millisecond') THEN
      PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    UPDATE ${s}.outbox_lanes l SET cursor = a.to_id, lease_expires_at = CASE
        WHEN l.lease_expires_at < now() + (p_lease_ms * 2 / 3) * interval '1 millisecond'
        THEN now() + p_lease_ms * interval '1 millisecond' ELSE l.lease_expires_at END
    FROM unnest(p_lanes, p_from, p_to) AS a (lane_no, from_id, to_id)
    WHERE l.lane = a.lane_no AND l.owner = p_owner AND l.cursor = a.from_id
      AND l.lease_expires_at > now();
    GET DIAGNOSTICS v_moved = ROW_COUNT;
    IF v_moved <> cardinality(p_lanes) THEN
      RAISE EXCEPTION 'agent-outbox: lanes % are no longer owned by % at the cursors it read them from', p_lanes, p_owner
        USING ERRCODE = 'OBX01';
    END IF;
  END IF;
  IF cardinality(p_park_ids) > 0 THEN
    INSERT INTO ${s}.outbox_lane_parked AS p
      (lane, id, aggregate_id, ordered, head, blocks, attempts, last_error, available_at, dead_at)
    SELECT f.lane, f.id, m.aggregate_id, m.ordered, NOT m.ordered,
           m.ordered AND (f.kind <> 'dead' OR p_dead_blocks),
           CASE WHEN f.kind = 'unsent' THEN 0 ELSE 1 END,
           f.error,
           now() + coalesce(f.delay_ms, 0) * interval '1 millisecond',
           CASE WHEN f.kind = 'dead' THEN now() END
    FROM unnest(p_park_lanes, p_park_ids, p_park_kinds, p_park_errors, p_park_delay_ms)
           AS f (lane, id, kind, error, delay_ms)
    JOIN ${s}.outbox_lane_messages m ON m.lane = f.lane AND m.id = f.id
    ORDER BY f.lane, f.id
    ON CONFLICT DO NOTHING;
    -- An unordered dead letter is no head either (head means "due once available").
    UPDATE ${s}.outbox_lane_parked p SET head = false
    FROM unnest(p_park_lanes, p_park_ids, p_park_kinds) AS f (lane, id, kind)
    WHERE p.lane = f.lane AND p.id = f.id AND f.kind = 'dead' AND NOT p.ordered;
    PERFORM ${s}.outbox_lane_promote(array_agg(m.lane), array_agg(m.aggregate_id))
    FROM (SELECT DISTINCT m.lane, m.aggregate_id
          FROM unnest(p_park_lanes, p_park_ids) AS f (lane, id)
          JOIN ${s}.outbox_lane_messages m ON m.lane = f.lane AND m.id = f.id
          WHERE m.ordered) m;
  END IF;
  IF p_batch <= 0 THEN
    RETURN;
  END IF;
  lane := -1; id := v_horizon.safe; sequence := v_horizon.pair_id;
  payload := to_jsonb(v_horizon.pair_xid::text);
  RETURN NEXT;
  lane := NULL; id := NULL; sequence := NULL; payload := NULL;
  SELECT EXISTS (
    SELECT 1 FROM ${s}.outbox_lane_parked p
    WHERE p.blocks AND p.lane IN (SELECT l.lane FROM ${s}.outbox_lanes l WHERE l.owner = p_owner))
  INTO v_any_blocked;
  FOR v_lane IN
    SELECT l.lane AS no, greatest(l.cursor, r.after) AS after FROM ${s}.outbox_lanes l
    LEFT JOIN unnest(p_read_lanes, p_read_after) AS r (lane_no, after) ON r.lane_no = l.lane
    WHERE l.owner = p_owner AND l.lease_expires_at > now()
    ORDER BY l.lane < p_start, l.lane
  LOOP
    EXIT WHEN v_left <= 0;
    IF NOT v_any_blocked OR NOT EXISTS (
         SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = v_lane.no AND p.blocks) THEN
      RETURN QUERY
      SELECT m.lane, m.id, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic,
             m.payload, m.headers, extract(epoch FROM m.created_at)::float8 * 1000
      FROM ${s}.outbox_lane_messages m
      WHERE m.lane = v_lane.no AND m.id > v_lane.after
      ORDER BY m.id LIMIT v_left;
      GET DIAGNOSTICS v_n = ROW_COUNT;
      v_upto := CASE WHEN v_n > 0 AND v_n < v_left THEN v_end END;
      v_left := v_left - v_n;
    ELSE
      -- A lane with a parked aggregate: row by row, parking that aggregate's later messages.
      v_seen := 0;
      v_upto := NULL;
      FOR v_row IN
        SELECT m.lane, m.id, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic,
               m.payload, m.headers, extract(epoch FROM m.created_at)::float8 * 1000 AS created_ms,
               -- Behind a blocking parked message of its aggregate (or that message itself):
               -- later in id order only. A row before it was read (and published or parked)
               -- before it, since within an aggregate id order is commit order: it comes back
               -- here only because the read starts at the position capped by the horizon, and
               -- the dispatcher has handled it (migration 025: 024 parked it again, and it was
               -- published twice).
               m.ordered AND EXISTS (
                 SELECT 1 FROM ${s}.outbox_lane_parked p
                 WHERE p.lane = m.lane AND p.aggregate_id = m.aggregate_id AND p.blocks
                   AND p.id <= m.id) AS behind
        FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND m.id > v_lane.after
        ORDER BY m.id LIMIT 4 * p_batch
      LOOP
        EXIT WHEN v_left <= 0;
        v_seen := v_seen + 1;
        v_upto := v_row.id;
        IF v_row.behind THEN
          INSERT INTO ${s}.outbox_lane_parked (lane, id, aggregate_id, ordered, head, blocks)
          VALUES (v_row.lane, v_row.id, v_row.aggregate_id, true, false, true)
          ON CONFLICT DO NOTHING;
        ELSE
          lane := v_row.lane; id := v_row.id; message_id := v_row.message_id;
          aggregate_id := v_row.aggregate_id; sequence := v_row.sequence;
          ordered := v_row.ordered; topic := v_row.topic; payload := v_row.payload;
          headers := v_row.headers; created_ms := v_row.created_ms;
          RETURN NEXT;
          v_left := v_left - 1;
        END IF;
      END LOOP;
      -- Ran out of rows (not of batch, nor of the 4 x batch it may examine): all of it seen.
      IF v_seen > 0 AND v_left > 0 AND v_seen < 4 * p_batch THEN
        v_upto := v_end;
      END IF;
    END IF;
    IF v_upto IS NOT NULL THEN
      lane := v_lane.no; id := v_upto; message_id := NULL; aggregate_id := NULL;
      sequence := NULL; ordered := NULL; topic := NULL; payload := NULL; headers := NULL;
      created_ms := NULL;
      RETURN NEXT;
    END IF;
  END LOOP;
END $$`;

/** `outbox_lane_settle_parked` as migration 025 created it. */
export const laneSettleParkedFunction025 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_lane_settle_parked(
  p_owner text, p_lanes smallint[], p_ids bigint[], p_kinds text[], p_errors text[],
  p_delay_ms float8[], p_dead_blocks boolean)
RETURNS void
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_promote record;
BEGIN
  IF EXISTS (
    SELECT 1 FROM unnest(p_lanes) AS a (lane_no)
    WHERE NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_lanes l
      WHERE l.lane = a.lane_no AND l.owner = p_owner AND l.lease_expires_at > now())) THEN
    RAISE EXCEPTION 'agent-outbox: lanes % are no longer owned by %', p_lanes, p_owner
      USING ERRCODE = 'OBX01';
  END IF;
  SELECT array_agg(p.lane) AS lanes, array_agg(p.aggregate_id) AS aggregates INTO v_promote
  FROM ${s}.outbox_lane_parked p
  JOIN unnest(p_lanes, p_ids, p_kinds) AS f (lane, id, kind) ON p.lane = f.lane AND p.id = f.id
  WHERE p.ordered AND (f.kind = 'published' OR (f.kind = 'dead' AND NOT p_dead_blocks));
  DELETE FROM ${s}.outbox_lane_parked p
  USING unnest(p_lanes, p_ids, p_kinds) AS f (lane, id, kind)
  WHERE p.lane = f.lane AND p.id = f.id AND f.kind = 'published';
  UPDATE ${s}.outbox_lane_parked p
  SET attempts = p.attempts + 1,
      last_error = f.error,
      available_at = now() + coalesce(f.delay_ms, 0) * interval '1 millisecond',
      dead_at = CASE WHEN f.kind = 'dead' THEN now() END,
      head = CASE WHEN f.kind = 'dead' AND NOT (p.ordered AND p_dead_blocks) THEN false
                  ELSE p.head END,
      blocks = CASE WHEN f.kind = 'dead' AND NOT p_dead_blocks THEN false ELSE p.blocks END
  FROM unnest(p_lanes, p_ids, p_kinds, p_errors, p_delay_ms) AS f (lane, id, kind, error, delay_ms)
  WHERE p.lane = f.lane AND p.id = f.id AND f.kind IN ('retry', 'dead');
  -- Deferred without an attempt (G9: its route is paused or probing, or it waits for a
  -- rate-limit token): due again after the delay, its attempts as they were.
  UPDATE ${s}.outbox_lane_parked p
  SET last_error = f.error,
      available_at = now() + coalesce(f.delay_ms, 0) * interval '1 millisecond'
  FROM unnest(p_lanes, p_ids, p_kinds, p_errors, p_delay_ms) AS f (lane, id, kind, error, delay_ms)
  WHERE p.lane = f.lane AND p.id = f.id AND f.kind = 'defer';
  IF v_promote.lanes IS NOT NULL THEN
    PERFORM ${s}.outbox_lane_promote(v_promote.lanes, v_promote.aggregates);
  END IF;
  -- Retention passed these while they were parked (outbox_lane_prune keeps parked rows): they go
  -- now that they are published.
  DELETE FROM ${s}.outbox_lane_messages m
  USING unnest(p_lanes, p_ids, p_kinds) AS f (lane, id, kind), ${s}.outbox_lanes l
  WHERE f.kind = 'published' AND m.lane = f.lane AND m.id = f.id
    AND l.lane = f.lane AND f.id <= l.pruned_to;
END $$`;
