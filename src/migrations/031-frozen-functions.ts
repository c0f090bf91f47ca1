import { LANE_DECISION_LOCK_CLASS } from '../sql/lanes.js';

// The function of migration 031 that a later migration replaced (`outbox_lane_next`: 037), as
// 031 created it: migrations are append-only (src/sql/lanes.ts holds the current text and the
// reasoning of every part).

/** `outbox_lane_next` as migration 031 created it. */
export const laneNextFunction031 = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_lane_next(
  p_owner text, p_lanes smallint[], p_from bigint[], p_to bigint[],
  p_park_lanes smallint[], p_park_ids bigint[], p_park_kinds text[], p_park_errors text[],
  p_park_delay_ms float8[], p_dead_blocks boolean,
  p_batch integer, p_start smallint, p_lease_ms integer,
  p_safe bigint, p_pair_id bigint, p_pair_xid bigint, p_async boolean,
  p_read_lanes smallint[], p_read_after bigint[],
  p_ahead_lanes smallint[], p_ahead_ids bigint[], p_read_tenants text[])
RETURNS TABLE (lane smallint, id bigint, message_id uuid, aggregate_id text, sequence bigint,
               ordered boolean, topic text, payload jsonb, headers jsonb, created_ms float8,
               shadow boolean)
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
  v_held text[];
  v_row record;
  v_at timestamptz;
  v_skip boolean;
  v_approval record;
  v_seen integer;
  v_upto bigint;
  v_end constant bigint := 9223372036854775807;
  v_share_lanes smallint[] := '{}';
  v_share_after bigint[] := '{}';
  v_share_pruned bigint[] := '{}';
  v_share_tenants text[] := '{}';
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
    -- Published ahead of the cursor (tenant shares, migration 028) and passed by it now:
    -- forgotten. Between the old and the new cursor only: what earlier moves deleted is not
    -- walked again (under a held snapshot its dead entries stay).
    DELETE FROM ${s}.outbox_lane_ahead a
    USING unnest(p_lanes, p_from, p_to) AS x (lane_no, from_id, to_id)
    WHERE a.lane = x.lane_no AND a.id > x.from_id AND a.id <= x.to_id;
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
    -- A delayed message that a read parked as its aggregate's head (below) while an earlier
    -- message of the aggregate was with the dispatcher: that one is parked now, blocking, so
    -- the delayed one is no longer head (one head an aggregate: it would be published first
    -- were it due first). outbox_lane_promote makes it head again, its delay kept.
    UPDATE ${s}.outbox_lane_parked p SET head = false
    FROM unnest(p_park_lanes, p_park_ids, p_park_kinds) AS f (lane, id, kind)
    JOIN ${s}.outbox_lane_messages m ON m.lane = f.lane AND m.id = f.id
    WHERE m.ordered AND (f.kind <> 'dead' OR p_dead_blocks)
      AND p.lane = f.lane AND p.aggregate_id = m.aggregate_id AND p.blocks AND p.id > f.id
      AND p.head;
    PERFORM ${s}.outbox_lane_promote(array_agg(m.lane), array_agg(m.aggregate_id))
    FROM (SELECT DISTINCT m.lane, m.aggregate_id
          FROM unnest(p_park_lanes, p_park_ids) AS f (lane, id)
          JOIN ${s}.outbox_lane_messages m ON m.lane = f.lane AND m.id = f.id
          WHERE m.ordered) m;
  END IF;
  -- What the last batch published (or parked) ahead of its lanes' cursors (tenant shares,
  -- migration 028, sql/lane-tenant-shares.ts): the reads below skip it. Not what a cursor has
  -- passed already (a position may have gone past it before this call moved the cursor).
  IF cardinality(p_ahead_ids) > 0 THEN
    INSERT INTO ${s}.outbox_lane_ahead (lane, id, tenant)
    SELECT f.lane, f.id, m.headers ->> 'tenant_id'
    FROM unnest(p_ahead_lanes, p_ahead_ids) AS f (lane, id)
    JOIN ${s}.outbox_lane_messages m ON m.lane = f.lane AND m.id = f.id
    JOIN ${s}.outbox_lanes l ON l.lane = f.lane
    WHERE f.id > l.cursor AND m.headers ->> 'tenant_id' IS NOT NULL
    ON CONFLICT DO NOTHING;
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
  -- Delays (migration 026): a message written with delayMs/availableAt has available_at set
  -- (NULL otherwise) and is in outbox_lane_messages_delayed_idx. Whether a lane has one after
  -- its read position: a probe of that partial index (two pages when it holds nothing; EXPLAIN
  -- ANALYZE of this query, 16 owned lanes: 16 probes, 32 buffer hits, ~0.016 ms) in the query
  -- that reads the lanes anyway. Not a query of its own over outbox_lanes: under a held
  -- snapshot every read of that table scans the dead versions of its 16 rows (measured in
  -- lane-bound.test.ts: a second read of it took the growth from 62 to 93 pages).
  FOR v_lane IN
    SELECT l.lane AS no, greatest(l.cursor, r.after) AS after, l.pruned_to, r.tenant,
           EXISTS (
             SELECT 1 FROM ${s}.outbox_lane_messages d
             WHERE d.lane = l.lane AND d.id > greatest(l.cursor, r.after)
               AND d.available_at IS NOT NULL) AS delayed,
           -- Rows published ahead of the position (tenant shares, migration 028): skipped.
           -- One probe of outbox_lane_ahead's primary key from the position.
           EXISTS (
             SELECT 1 FROM ${s}.outbox_lane_ahead a
             WHERE a.lane = l.lane AND a.id > greatest(l.cursor, r.after)) AS ahead
    FROM ${s}.outbox_lanes l
    LEFT JOIN unnest(p_read_lanes, p_read_after, p_read_tenants) AS r (lane_no, after, tenant)
      ON r.lane_no = l.lane
    WHERE l.owner = p_owner AND l.lease_expires_at > now()
    ORDER BY l.lane < p_start, l.lane
  LOOP
    -- The batch is full: the lane is not read, but it may hold other tenants' messages that a
    -- share publishes ahead of its cursor (below).
    IF v_left <= 0 THEN
      v_share_lanes := v_share_lanes || v_lane.no;
      v_share_after := v_share_after || v_lane.after;
      v_share_pruned := v_share_pruned || v_lane.pruned_to;
      v_share_tenants := v_share_tenants || v_lane.tenant;
      CONTINUE;
    END IF;
    -- A lane with no delayed or held message after its position, nothing published ahead
    -- of it and nothing parked blocking: the statement of migration 025 (and shadow). Else
    -- row by row (below). This loop's query saw the lane so; the statement below takes a newer
    -- snapshot (READ COMMITTED: a snapshot a statement), and a delayed or held message committed
    -- in between was returned by it and published at once, before its time or its approval
    -- (migration 031; test/integration/lanes/lane-read-snapshot.test.ts). It stops before the
    -- first such row it sees: one probe of the partial index outbox_lane_messages_delayed_idx
    -- (empty on the hot path). That row was committed after this call's horizon was taken, so
    -- the horizon keeps the cursor below it, and the next call parks it. Until migration 031
    -- a lane with delayed messages all due had a statement of its own, with the same gap
    -- between its check and its read: such lanes are read row by row now (rare: delays, held
    -- messages, tenants' shares). Measured, a drain of 100,000 messages all with a past delay:
    -- 152-163k/s against 196-204k with that statement; without delays, no change. Rejected: a
    -- stop in that statement too (the first delayed row not due and not parked): the rows it
    -- skips (parked ones) let it reach delayed rows that its check never looked at, and the
    -- marker could not tell where it stopped.
    IF NOT v_lane.delayed AND NOT v_lane.ahead AND (NOT v_any_blocked OR NOT EXISTS (
         SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = v_lane.no AND p.blocks)) THEN
      RETURN QUERY
      SELECT m.lane, m.id, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic,
             m.payload, m.headers, extract(epoch FROM m.created_at)::float8 * 1000, m.shadow
      FROM ${s}.outbox_lane_messages m
      WHERE m.lane = v_lane.no AND m.id > v_lane.after
        AND m.id < coalesce((
          SELECT d.id FROM ${s}.outbox_lane_messages d
          WHERE d.lane = v_lane.no AND d.id > v_lane.after AND d.available_at IS NOT NULL
          ORDER BY d.id LIMIT 1), v_end)
      ORDER BY m.id LIMIT v_left;
      GET DIAGNOSTICS v_n = ROW_COUNT;
      -- Ran out of rows: the cursor may go to the horizon.
      v_upto := CASE WHEN v_n > 0 AND v_n < v_left THEN v_end END;
      v_left := v_left - v_n;
    ELSE
      -- A lane with a parked aggregate or a message not due yet: row by row, parking the
      -- aggregate's later messages, and a message not due as a deferral (attempts 0) due at its
      -- available_at, which then blocks its ordered aggregate as a failure does (G4): the
      -- parked path publishes it when due, and its aggregate's later messages after it.
      -- Held messages (migration 027): a decision on this lane (sql/lane-approvals.ts) holds
      -- its lock exclusively while it changes what is parked here; this read does not wait for
      -- it: the lane is left for the next call (no rows, no marker: it stays where it is).
      CONTINUE WHEN NOT pg_try_advisory_xact_lock_shared(${LANE_DECISION_LOCK_CLASS}, v_lane.no);
      v_seen := 0;
      v_upto := NULL;
      v_held := '{}';
      FOR v_row IN
        SELECT m.lane, m.id, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic,
               m.payload, m.headers, extract(epoch FROM m.created_at)::float8 * 1000 AS created_ms,
               m.shadow, m.available_at,
               -- Behind a blocking parked message of its aggregate (or that message itself):
               -- later in id order only. A row before it was read (and published or parked)
               -- before it, since within an aggregate id order is commit order: it comes back
               -- here only because the read starts at the position capped by the horizon, and
               -- the dispatcher has handled it (migration 025: 024 parked it again, and it was
               -- published twice).
               m.ordered AND EXISTS (
                 SELECT 1 FROM ${s}.outbox_lane_parked p
                 WHERE p.lane = m.lane AND p.aggregate_id = m.aggregate_id AND p.blocks
                   AND p.id <= m.id) AS behind,
               -- An unordered delayed message parked by an earlier read, read again.
               m.available_at IS NOT NULL AND EXISTS (
                 SELECT 1 FROM ${s}.outbox_lane_parked p
                 WHERE p.lane = m.lane AND p.id = m.id) AS parked,
               -- Published (or parked) ahead of the cursor by a tenant share (migration 028).
               v_lane.ahead AND EXISTS (
                 SELECT 1 FROM ${s}.outbox_lane_ahead a
                 WHERE a.lane = m.lane AND a.id = m.id OFFSET 0) AS ahead_done
        FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND m.id > v_lane.after
        ORDER BY m.id LIMIT 4 * p_batch
      LOOP
        EXIT WHEN v_left <= 0;
        v_seen := v_seen + 1;
        v_upto := v_row.id;
        -- v_held: aggregates this loop parked a delayed message of (the loop's query does not
        -- see what the loop inserts).
        -- A held message (migration 027) is written with available_at = infinity: its decision
        -- says when it is due. Awaiting (or overdue, until the expiry sweep decides it): never,
        -- parked as a deferral that never comes due, blocking its ordered aggregate. Approved:
        -- at the time it was written for (or now). Rejected or expired: never published; it
        -- blocks its ordered aggregate for good under the policy it was decided with (hold),
        -- else it is passed over like a consumed message. One primary-key probe of
        -- outbox_lane_approvals per held message read; nothing for any other message.
        v_at := v_row.available_at;
        v_skip := v_row.ahead_done;
        IF v_at = 'infinity' THEN
          SELECT a.state, a.available_at, a.dead_blocks INTO v_approval
          FROM ${s}.outbox_lane_approvals a WHERE a.id = v_row.id;
          IF FOUND AND v_approval.state = 'approved' THEN
            v_at := coalesce(v_approval.available_at, '-infinity');
          ELSIF FOUND AND v_approval.state IN ('rejected', 'expired') THEN
            v_skip := NOT (v_row.ordered AND v_approval.dead_blocks);
          END IF;
        END IF;
        IF v_skip THEN
          NULL;
        ELSIF v_row.behind OR (v_row.ordered AND v_row.aggregate_id = ANY (v_held)) THEN
          -- Its own due time kept: outbox_lane_promote makes it head no earlier than that.
          INSERT INTO ${s}.outbox_lane_parked
            (lane, id, aggregate_id, ordered, head, blocks, available_at)
          VALUES (v_row.lane, v_row.id, v_row.aggregate_id, true, false, true,
                  coalesce(v_at, now()))
          ON CONFLICT DO NOTHING;
        ELSIF v_row.parked THEN
          NULL;
        ELSIF v_at > now() THEN
          INSERT INTO ${s}.outbox_lane_parked
            (lane, id, aggregate_id, ordered, head, blocks, available_at)
          VALUES (v_row.lane, v_row.id, v_row.aggregate_id, v_row.ordered, true, v_row.ordered,
                  v_at)
          ON CONFLICT DO NOTHING;
          IF v_row.ordered THEN
            v_held := v_held || v_row.aggregate_id;
          END IF;
        ELSE
          lane := v_row.lane; id := v_row.id; message_id := v_row.message_id;
          aggregate_id := v_row.aggregate_id; sequence := v_row.sequence;
          ordered := v_row.ordered; topic := v_row.topic; payload := v_row.payload;
          headers := v_row.headers; created_ms := v_row.created_ms; shadow := v_row.shadow;
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
      created_ms := NULL; shadow := NULL;
      RETURN NEXT;
    END IF;
    -- The lane that filled the batch: its other tenants' messages further on may get a share.
    IF v_left <= 0 AND v_upto IS DISTINCT FROM v_end THEN
      v_share_lanes := v_share_lanes || v_lane.no;
      v_share_after := v_share_after || v_lane.after;
      v_share_pruned := v_share_pruned || v_lane.pruned_to;
      v_share_tenants := v_share_tenants || v_lane.tenant;
    END IF;
  END LOOP;
  -- 7. Since migration 028, tenant shares: a full batch is followed by a marker (lane -2) and
  -- the shares of other tenants' messages further on in the lanes (sql/lane-tenant-shares.ts).
  -- Not for a caller that passes no tenant cursors (NULL: a dispatcher of version 27).
  IF v_left <= 0 AND cardinality(v_share_lanes) > 0 AND p_read_tenants IS NOT NULL THEN
    lane := -2; id := NULL; message_id := NULL; aggregate_id := NULL; sequence := NULL;
    ordered := NULL; topic := NULL; payload := NULL; headers := NULL; created_ms := NULL;
    shadow := NULL;
    RETURN NEXT;
    RETURN QUERY SELECT * FROM ${s}.outbox_lane_shares(
      v_share_lanes, v_share_after, v_share_pruned, v_share_tenants, p_batch);
  END IF;
END $$`;
