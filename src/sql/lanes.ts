import { notifyChannel } from './notify.js';
import { passedPublishedSql } from './lane-archive.js';

/**
 * The lanes engine's SQL (migration 024, issue 43; the tables and why they look so are described
 * there). The functions are created by the migration; a change to one of them is a new migration
 * that freezes the old text, as 011/012/018/020 do for the claim engine.
 *
 * One round trip a batch: `outbox_lane_next` commits what the previous batch did (cursor moves,
 * failures parked) and reads the next batch, in one transaction. Measured in the prototype
 * (bench/prototypes/cursor-lanes.ts): a read and a separate cursor update cost two flushed
 * commits a batch and 0.91 of PgQ's drain; one call, 1.02–1.05.
 */

/**
 * The horizon: the highest id no running transaction can still commit. Rows above it may be read
 * and published (what is visible is committed, and an aggregate's ids are in its commit order),
 * but a lane's cursor never passes it: an id below it that is not visible yet may still commit.
 *
 * A pair (N, X) is taken: N the id sequence's value, then X the next xid to be assigned, read
 * after it. Every id up to N was taken by a transaction that had its xid before it took the id
 * (the writer locks its aggregate's counter row first), so below X. Once no transaction with an
 * xid below X runs, every id up to N is final.
 *
 * X is NOT a snapshot's xmax: since PostgreSQL 14 that is the latest COMPLETED xid + 1, and xids
 * assigned above it to transactions still running are in no snapshot's list (the first version
 * used it and lost messages under concurrent writers: test/integration/lanes/). Nor the call's
 * own xid (the prototype's): assigning one makes every call a flushed commit. It is the value
 * `age()` counts from: the transaction's first `age()` call fixes the next xid
 * (GetStableLatestTransactionId), so that call comes after N is read, in a transaction that has
 * no xid yet (checked), and X = xmax + age(xmax), widened to 64 bits from a snapshot's epoch.
 *
 * The pair lives in the caller (each dispatcher keeps its own, passes it in and gets it back), not
 * in the database: recording it there (setval, the prototype) assigned every call an xid and so a
 * flushed commit, most of a wake-up's latency. A dispatcher that restarts starts from its lanes'
 * cursors, which are always at or below a horizon that was safe.
 *
 * - The test after the pair is taken runs on a fresh snapshot too, so a message is final at the
 *   first call after its commit when nothing older runs.
 * - The cheap test is the snapshot's xmin (cluster-wide, so conservative); only when it fails is
 *   this database's activity probed (a long transaction in another database must not hold us;
 *   prepared transactions of this database count). A read-only transaction holds nothing: it has
 *   no xid. That is why a held REPEATABLE READ snapshot does not hold the horizon; a long WRITE
 *   transaction of this database does (docs/lanes.md).
 * - Only under READ COMMITTED is a statement's snapshot taken when it starts; the function
 *   refuses to run under another isolation level rather than trust an older snapshot.
 */
export const laneHorizonFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_horizon(p_safe bigint, p_pair_id bigint, p_pair_xid bigint,
  OUT safe bigint, OUT pair_id bigint, OUT pair_xid bigint)
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_last bigint;
  v_xmin bigint;
BEGIN
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'agent-outbox: the lanes dispatcher needs READ COMMITTED, this session runs %',
      current_setting('transaction_isolation')
      USING HINT = 'Unset default_transaction_isolation for the dispatcher''s role or database.';
  END IF;
  IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
    RAISE EXCEPTION 'agent-outbox: outbox_lane_horizon must run before its transaction writes anything';
  END IF;
  safe := p_safe;
  pair_id := p_pair_id;
  pair_xid := p_pair_xid;
  IF pair_xid = 0 THEN
    v_last := coalesce(pg_sequence_last_value('${s}.outbox_lane_ids'), 0);
    IF v_last <= safe THEN
      RETURN;
    END IF;
    pair_id := v_last;
    -- The next xid, read after v_last: the transaction's first age() (see the comment above).
    EXECUTE 'SELECT x::text::bigint + age(xid(x)) FROM pg_snapshot_xmax(pg_current_snapshot()) x'
      INTO pair_xid;
  END IF;
  EXECUTE 'SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint' INTO v_xmin;
  IF v_xmin >= pair_xid
     OR NOT EXISTS (
       SELECT 1 FROM pg_stat_get_activity(NULL) a
       WHERE a.datid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
         AND a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
         AND age(a.backend_xid) > age(xid(pair_xid::text::xid8)))
     AND NOT EXISTS (
       SELECT 1 FROM pg_prepared_xacts p
       WHERE p.database = current_database()
         AND age(p.transaction) > age(xid(pair_xid::text::xid8))) THEN
    safe := greatest(safe, pair_id);
    pair_id := 0;
    pair_xid := 0;
  END IF;
END $$`;

/**
 * Makes the first blocking parked message of each given aggregate its head (due no earlier than
 * now), so that exactly one message per parked ordered aggregate is ever due: after its head was
 * published, or dead-lettered under `skip`, or when a batch parked a failure and what followed it.
 */
export const lanePromoteFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_promote(p_lanes smallint[], p_aggregates text[]) RETURNS void
LANGUAGE sql SET jit = off AS $$
  UPDATE ${s}.outbox_lane_parked p
  SET head = true, available_at = greatest(p.available_at, now())
  FROM (
    SELECT DISTINCT ON (b.lane, b.aggregate_id) b.lane, b.id
    FROM ${s}.outbox_lane_parked b
    JOIN unnest(p_lanes, p_aggregates) AS a (lane, aggregate_id)
      ON b.lane = a.lane AND b.aggregate_id = a.aggregate_id
    WHERE b.blocks
    ORDER BY b.lane, b.aggregate_id, b.id
  ) first
  WHERE p.lane = first.lane AND p.id = first.id AND NOT p.head
$$`;

/**
 * The first key of the lane decision lock (migration 027): "laap" read as a 32-bit integer, the
 * second key is the lane. Held exclusively by a decision on held messages while it changes a
 * lane's parked rows (sql/lane-approvals.ts), tried shared by `outbox_lane_next` before it reads
 * a lane row by row. A collision with an application's two-key advisory lock only makes a
 * decision wait or a read leave a lane to its next call, never decides anything.
 */
export const LANE_DECISION_LOCK_CLASS = 1818321264;

/**
 * One batch: commits the previous batch's outcome, then reads the next.
 *
 * 1. The horizon (`outbox_lane_horizon`, from the caller's pair), first: before this call writes
 *    anything, so its own xid does not fail the cheap test.
 * 2. Cursor moves, fenced: each lane moves from the cursor the caller read it at (`p_from`) to
 *    `p_to`, only while `p_owner` holds its lease. A lane lost to another owner or moved by anyone
 *    else raises, and nothing of the call is committed (the caller lost the lanes: it stops
 *    publishing them; the new owner reads from the old cursor, so at worst a message is published
 *    again, with the same message id). The lease is renewed when less than 2/3 of it is left.
 * 3. What the batch did not publish is parked: `p_park_kind` 'retry' (failed: attempts + 1, error,
 *    due after `p_park_delay_ms`), 'dead' (failed for good), 'unsent' (never handed to the
 *    publisher: due now, no attempt). An ordered one blocks its aggregate (`blocks`), and
 *    `outbox_lane_promote` picks each aggregate's head.
 * 4. Up to `p_batch` rows from the caller's lanes after their cursors (or after the positions
 *    it has read them to, `p_read_lanes`/`p_read_after`: a dispatcher moves its cursors in the
 *    database at most once a second, see lane-dispatcher.ts), lane by lane from `p_start`
 *    until the batch is full — visible rows, above the horizon too (the caller remembers what it
 *    handled above a cursor, and the cursor waits for the horizon). When an ordered aggregate of
 *    a lane is parked, its later messages are parked behind it as they are read. At most
 *    4 × p_batch rows of a lane are examined a call, so a deep parked aggregate costs each call a
 *    bounded amount (G7).
 * 5. Since migration 026, delays: a message whose `available_at` (delayMs/availableAt; NULL
 *    without a delay) is still ahead when it is read is not returned but parked as a deferral
 *    (attempts 0, head, due at its available_at); an ordered one blocks its aggregate, whose
 *    later messages park behind it as behind a failure (G4). The parked path publishes them
 *    when due. Rejected: a WHERE that skips rows not due (the cursor would pass them, or wait
 *    for them and hold its whole lane back); parking them in the writer (an ordered message's
 *    predecessors may not have been read yet, and the parked path would publish it before
 *    them). What it costs a lane without delays: one probe of the empty partial index
 *    `outbox_lane_messages_delayed_idx` a lane, inside a statement the call ran already; its
 *    rows are then read by the statement of migration 025, unchanged. A lane with a message not
 *    due within reach is read row by row, as a lane with a parked aggregate is (at most
 *    4 × p_batch rows a call, each not due parked: a write per delayed message read early).
 *    And `shadow` is returned: the dispatcher settles a shadow message without handing it to
 *    the publisher, as the claim engine does.
 *
 * 6. Since migration 027, held messages (`requiresApproval`): written with available_at =
 *    infinity, so they take the delays' path above and nothing else does. When the read meets
 *    one it probes its decision in `outbox_lane_approvals` (primary key): awaiting, it is parked
 *    as a deferral that never comes due, and an ordered one holds its aggregate's later
 *    messages behind it (G4) as a failure does; approved, it is due at the time it was written
 *    for (or at once); rejected or expired, it is never published, and blocks its ordered
 *    aggregate for good only when decided under `hold`. A decision changes the parked rows
 *    itself (sql/lane-approvals.ts), under the lane's advisory lock: this read takes the lock
 *    shared, without waiting (a lane whose lock a decision holds is left to the next call), so
 *    a decision never meets a read that parks from an older state. A lane read on the fast
 *    path (no delayed or held message after its position, nothing blocking) takes no lock.
 *    Rejected: a FOR SHARE of the decision row (a write per held message read, and a batch
 *    that waits for a person's transaction); a decision that only sets the state and lets
 *    the dispatcher apply it (the parked path would have to read every due row's decision).
 *
 * 7. Since migration 028, tenants' fair shares (sql/lane-tenant-shares.ts): the call records
 *    what the last batch published ahead of its lanes' cursors (`p_ahead_lanes`/`p_ahead_ids`,
 *    in `outbox_lane_ahead`, not what a cursor has passed), the lane reads skip those rows (one
 *    probe of the table's primary key a lane; a probe a row on a lane that has some), a cursor
 *    move deletes the ones it passes, and a lane whose rows after its position were all
 *    published ahead is reported read to its end so that its cursor passes them. A FULL batch
 *    is followed by a marker (lane -2) and `outbox_lane_shares` over the lanes the batch did
 *    not read to their end, from each lane's tenant cursor (`p_read_tenants`, aligned with
 *    `p_read_lanes`). NULL `p_read_tenants` (the version-27 signature): no shares.
 *
 * `created_ms` is the message's created_at in ms since the epoch: parsing a timestamptz into a
 * Date in node-postgres was ~20 % of a batch's read time (500 rows: 5.0–6.0 ms with it, 3.9–4.7
 * without), a float costs nothing to parse.
 *
 * Besides messages it returns MARKER rows (message_id NULL): first one with lane -1 carrying the
 * horizon (id = safe, sequence = the pair's id, payload = the pair's xid as text); then one per
 * lane that had rows and was not filled by them, id = how far the lane was examined, or
 * 9223372036854775807 when it ran out of rows (its cursor may then go as far as the horizon). A
 * lane with nothing after its cursor returns nothing and stays: moving it over other lanes' ids
 * would be a write (a lane-row version a held snapshot keeps) that buys nothing.
 */
export const laneNextFunctionSql = (s: string) => `
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
               -- An unordered delayed message parked by an earlier read, read again. A probe
               -- of the primary key a row. OFFSET 0 (migration 037): with statistics of the
               -- table the planner made this a hashed subplan, built from a walk of the
               -- whole primary key, with every dead entry a held snapshot keeps (4,961
               -- buffers for a batch instead of 20: lane-approvals-bound.test.ts).
               m.available_at IS NOT NULL AND EXISTS (
                 SELECT 1 FROM ${s}.outbox_lane_parked p
                 WHERE p.lane = m.lane AND p.id = m.id OFFSET 0) AS parked,
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

/**
 * A dispatcher's share of the lanes: registers `p_owner` as alive, then takes free or expired
 * lanes up to its share (the lanes over the live dispatchers, rounded up) or gives back what it
 * holds over it, highest lanes first. Returns the lanes it owns now, with their cursors. Called
 * only when the caller has no batch in flight, so a lane given back has nothing unsettled.
 */
export const laneBalanceFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_balance(p_owner text, p_lease_ms integer, p_max_lanes integer)
RETURNS TABLE (lane smallint, cursor bigint)
LANGUAGE plpgsql SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v_lanes integer;
  v_alive integer;
  v_share integer;
  v_owned integer;
BEGIN
  INSERT INTO ${s}.outbox_lane_owners AS o (owner, seen_until)
  VALUES (p_owner, now() + p_lease_ms * interval '1 millisecond')
  ON CONFLICT (owner) DO UPDATE SET seen_until = excluded.seen_until;
  DELETE FROM ${s}.outbox_lane_owners o WHERE o.seen_until < now() - interval '1 minute';
  SELECT count(*) INTO v_lanes FROM ${s}.outbox_lanes;
  SELECT count(*) INTO v_alive FROM ${s}.outbox_lane_owners o WHERE o.seen_until > now();
  v_share := least(p_max_lanes, (v_lanes + v_alive - 1) / greatest(v_alive, 1));
  UPDATE ${s}.outbox_lanes l SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
  WHERE l.owner = p_owner AND l.lease_expires_at > now();
  SELECT count(*) INTO v_owned FROM ${s}.outbox_lanes l
  WHERE l.owner = p_owner AND l.lease_expires_at > now();
  IF v_owned > v_share THEN
    UPDATE ${s}.outbox_lanes l SET owner = NULL, lease_expires_at = NULL
    WHERE l.lane IN (SELECT g.lane FROM ${s}.outbox_lanes g WHERE g.owner = p_owner
                     ORDER BY g.lane DESC LIMIT v_owned - v_share);
  ELSIF v_owned < v_share THEN
    UPDATE ${s}.outbox_lanes l SET owner = p_owner,
           lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
    WHERE l.lane IN (SELECT g.lane FROM ${s}.outbox_lanes g
                     WHERE g.owner IS NULL OR g.lease_expires_at <= now()
                     ORDER BY g.lane LIMIT v_share - v_owned
                     FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN QUERY SELECT l.lane, l.cursor FROM ${s}.outbox_lanes l
  WHERE l.owner = p_owner AND l.lease_expires_at > now() ORDER BY l.lane;
END $$`;

/**
 * The parked path's outcome, fenced by the lanes' ownership (raises as `outbox_lane_next` does):
 * 'published' leaves the table and its aggregate's next parked message becomes head; 'retry'
 * counts the attempt and waits `p_delay_ms`; 'dead' dead-letters it (under `skip`, p_dead_blocks
 * false, it stops blocking and the next becomes head); 'defer' waits `p_delay_ms` without an
 * attempt (since migration 025: a paused or probing route, a rate-limit token); 'unsent' stays as
 * it is, due. Since migration 033 a published message that retention passed while it was parked
 * is archived when that prune archived (sql/lane-archive.ts); 025's text is frozen in
 * 025-frozen-functions.ts.
 */
export const laneSettleParkedFunctionSql = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_lane_settle_parked(
  p_owner text, p_lanes smallint[], p_ids bigint[], p_kinds text[], p_errors text[],
  p_delay_ms float8[], p_dead_blocks boolean)
RETURNS void
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_promote record;
  v_passed bigint;
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
  -- now that they are published, archived if that prune archived (migration 033).
${passedPublishedSql(s)}
END $$`;

/**
 * Retention: deletes consumed messages (at or below their lane's cursor) older than
 * `p_older_than_ms`, at most `p_limit` per lane a call, and returns how many. Each lane keeps how
 * far it was pruned (`pruned_to`) and starts after it, so a prune never walks again what earlier
 * ones deleted: under a held snapshot those dead entries stay, and a walk from the start of each
 * lane would grow with history. Parked messages stay (they are still to be published; the parked
 * path deletes them once published, `outbox_lane_settle_parked`). Age is read on the first
 * `p_limit` rows after `pruned_to`, which are in id order, near enough to age order: a row a
 * little younger than the cut-off among older ones goes with them (it was consumed already).
 */
export const lanePruneFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_prune(p_older_than_ms float8, p_limit integer) RETURNS bigint
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_lane record;
  v_to bigint;
  v_n bigint;
  v_total bigint := 0;
BEGIN
  FOR v_lane IN
    SELECT l.lane AS no, l.cursor, l.pruned_to FROM ${s}.outbox_lanes l
    WHERE l.cursor > l.pruned_to ORDER BY l.lane
  LOOP
    SELECT max(w.id) INTO v_to FROM (
      SELECT m.id, m.created_at FROM ${s}.outbox_lane_messages m
      WHERE m.lane = v_lane.no AND m.id > v_lane.pruned_to AND m.id <= v_lane.cursor
      ORDER BY m.id LIMIT p_limit) w
    WHERE w.created_at < now() - p_older_than_ms * interval '1 millisecond';
    CONTINUE WHEN v_to IS NULL;
    DELETE FROM ${s}.outbox_lane_messages m
    WHERE m.lane = v_lane.no AND m.id > v_lane.pruned_to AND m.id <= v_to
      AND NOT EXISTS (
        SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = m.lane AND p.id = m.id);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;
    UPDATE ${s}.outbox_lanes l SET pruned_to = v_to
    WHERE l.lane = v_lane.no AND l.pruned_to < v_to;
  END LOOP;
  RETURN v_total;
END $$`;

/**
 * When the first parked head of `$1`'s lanes comes due, in ms from now (negative: due already;
 * NULL: none is parked; Infinity: held at infinity), through `outbox_lane_parked_due_idx`, one
 * row a lane, of the lanes whose lease holds (as the parked path's read). Asked when the
 * parked path found nothing due. Why: a dispatcher knows when what it parked itself comes due,
 * but not what the lanes it took over hold. Three `outbox dispatch --engine lanes` processes
 * under one rate limit: the first parked the backlog at its token slots, gave two thirds of its
 * lanes to the others, and from then on woke at slots whose messages were no longer its own,
 * while the new owners looked once a second and spent a second's tokens at once (busiest 5 s at
 * 1.2 of the limit, bench `details.rateLimitWindows.lanes`).
 */
export const laneNextParkedDueSql = (s: string) => `
SELECT ((extract(epoch FROM min(q.available_at)) - extract(epoch FROM now())) * 1000)::float8
       AS "inMs"
FROM ${s}.outbox_lanes l
CROSS JOIN LATERAL (
  SELECT q.available_at FROM ${s}.outbox_lane_parked q
  WHERE q.lane = l.lane AND q.head AND q.dead_at IS NULL
  ORDER BY q.available_at LIMIT 1
) q
WHERE l.owner = $1 AND l.lease_expires_at > now()`;

/**
 * The parked path's read: due heads of the caller's lanes, oldest due first, each ordered head
 * with the run of its aggregate's parked messages behind it, in id order, up to `$2` rows in all
 * (the dispatcher publishes a run in order and stops it at its first failure, as a batch does).
 * A head alone a call would drain an aggregate that a replay or a recovered destination sets free
 * at one message a call (measured: 1,999 parked behind a replayed dead letter, ~160 a second).
 * Bounded by the batch: the heads through `outbox_lane_parked_due_idx`, each run through
 * `outbox_lane_parked_blocks_idx` from its head.
 */
export const laneDueSql = (s: string) => `
WITH heads AS (
  SELECT q.lane, q.id, q.aggregate_id, q.ordered, q.blocks, q.attempts, q.available_at
  FROM ${s}.outbox_lanes l
  CROSS JOIN LATERAL (
    SELECT q.lane, q.id, q.aggregate_id, q.ordered, q.blocks, q.attempts, q.available_at
    FROM ${s}.outbox_lane_parked q
    WHERE q.lane = l.lane AND q.head AND q.dead_at IS NULL AND q.available_at <= now()
    ORDER BY q.available_at LIMIT $2
  ) q
  WHERE l.owner = $1 AND l.lease_expires_at > now()
  ORDER BY q.available_at
  LIMIT $2
), due AS (
  SELECT h.available_at, h.lane, h.id, h.attempts FROM heads h
  UNION ALL
  -- Behind a head that blocks its aggregate (not a dead letter replayed under skip, which goes
  -- out on its own): the aggregate's next parked messages, in order.
  SELECT h.available_at, r.lane, r.id, r.attempts
  FROM heads h
  CROSS JOIN LATERAL (
    SELECT w.lane, w.id, w.attempts FROM (
      SELECT b.lane, b.id, b.attempts,
             -- A delayed message parked behind (migration 026) keeps its due time: the run
             -- stops before the first one not due yet, which becomes head once what precedes it
             -- is published (outbox_lane_promote keeps its available_at).
             bool_or(b.available_at > now()) OVER (ORDER BY b.id) AS later
      FROM (
        SELECT b.lane, b.id, b.attempts, b.available_at FROM ${s}.outbox_lane_parked b
        WHERE h.ordered AND h.blocks AND b.lane = h.lane AND b.aggregate_id = h.aggregate_id
          AND b.blocks AND b.id > h.id AND b.dead_at IS NULL
        ORDER BY b.id LIMIT $2
      ) b
    ) w
    WHERE NOT w.later
  ) r
)
SELECT d.lane, d.id, d.attempts, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic,
       m.payload, m.headers, extract(epoch FROM m.created_at)::float8 * 1000 AS created_ms,
       m.shadow
FROM due d
JOIN ${s}.outbox_lane_messages m ON m.lane = d.lane AND m.id = d.id
ORDER BY d.available_at, d.lane, d.id
LIMIT $2`;

/**
 * The dispatcher's call of `outbox_lane_next` (22 parameters since migration 028, in the function's order), its rows
 * as rows. Tried (session 24): the batch as ONE json text (json_agg of json_build_array a row),
 * which halved what node-postgres spends receiving a batch (2.6 -> 1.2-1.5 µs a message of the
 * process's CPU) but cost the database ~1.7 µs a message more (2.7 -> 4.4-4.9, /proc of the
 * backends): drains of 100,000 on a quiet machine were slower with it, 113-121k vs 131-148k msg/s
 * with one dispatcher and 133-147k vs 160-191k with two (both cores busy: the sum is what counts).
 */
export const laneNextCallSql = (s: string) =>
  `SELECT * FROM ${s}.outbox_lane_next($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)`;

/**
 * The messages a wake-up named (the writer's NOTIFY payload, lane:id), read by primary key, as
 * `outbox_lane_next` returns rows: those of lanes `p_owner` owns with at least `p_margin_ms` ms of
 * lease left, due, and not parked (the dispatcher keeps those nothing can come before:
 * #publishHinted). Why: an idle dispatcher woken by a NOTIFY read every lane it owns
 * (`outbox_lane_next`: 0.87–0.96 ms p50 over 16 empty lanes on this machine under load, against
 * 0.30–0.40 for this read), and that read was most of the commit-to-publish latency (issue 43).
 * Whatever this misses (a row not visible yet, a lease about to end) the lane read finds as before.
 *
 * A function since migration 029 (before it the same SELECT was sent as a statement): planning
 * that statement was most of its cost — server side, 700–1,090 µs a call planned each time
 * against 56–93 µs in this function (a DO loop of 3,000 calls, machine loaded; prepared from the
 * client 0.45 ms a round trip against 1.03 plain). Its plan is pinned: `plan_cache_mode =
 * force_generic_plan` and `enable_seqscan = off`. Measured without them: on a table of 200 rows
 * the generic plan (which a prepared statement keeps after five calls) is a hash join over a
 * sequential scan of `outbox_lane_messages`, kept while the table grows until the next ANALYZE
 * (statement-name.ts: the claim engine's p95 went from 11 to 225 ms so); with
 * `enable_seqscan = off` alone PL/pgSQL planned each call anew (a custom plan looked cheaper than
 * the generic one, 490–810 µs a call). Every row here is found by a primary key, so no scan is
 * ever the right plan. (test/integration/lanes/lane-by-ids-plan.test.ts reads the plan.)
 */
export const laneByIdsFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_by_ids(p_lanes smallint[], p_ids bigint[], p_owner text,
  p_margin_ms integer)
RETURNS TABLE (lane smallint, id bigint, message_id uuid, aggregate_id text, sequence bigint,
               ordered boolean, topic text, payload jsonb, headers jsonb, created_ms float8,
               shadow boolean)
LANGUAGE plpgsql STABLE
SET jit = off SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $$
BEGIN
  RETURN QUERY
  SELECT m.lane, m.id, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic, m.payload,
         m.headers, extract(epoch FROM m.created_at)::float8 * 1000, m.shadow
  FROM unnest(p_lanes, p_ids) AS k (lane, id)
  JOIN ${s}.outbox_lane_messages m ON m.lane = k.lane AND m.id = k.id
  JOIN ${s}.outbox_lanes l ON l.lane = m.lane
  WHERE l.owner = p_owner AND l.lease_expires_at > now() + p_margin_ms * interval '1 millisecond'
    AND m.available_at IS NULL
    AND NOT EXISTS (SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = m.lane AND p.id = m.id)
  ORDER BY m.lane, m.id;
END $$`;

/**
 * One call of {@link laneByIdsFunctionSql}: $1 lanes, $2 ids, $3 owner, $4 lease margin (ms).
 *
 * The one dispatcher statement run as a named prepared statement (store/statement-name.ts) where
 * the executor prepares (`fromPg`'s default): it is on the path from a commit to its publish,
 * once per wake-up, and parsing and planning the call was a quarter of its round trip (0.179 ms
 * prepared vs 0.235 ms a call from a lone client, session 26). Its plan cannot go wrong: a
 * function scan (the function's own plan is pinned, above). Behind a transaction pooler that
 * loses prepared statements the dispatcher falls back to {@link laneByIdsUnpreparedSql} at the
 * first failure (lane-dispatcher.ts `#publishNamed`).
 */
export const laneByIdsSql = (s: string) =>
  `SELECT * FROM ${s}.outbox_lane_by_ids($1::smallint[], $2::bigint[], $3, $4)`;

/** {@link laneByIdsSql} under a text of its own, never marked preparable. */
export const laneByIdsUnpreparedSql = (s: string) =>
  `${laneByIdsSql(s)} -- unprepared: a pooler lost the prepared statement`;

/**
 * Whether a transaction that may have written lane messages WITHOUT a NOTIFY can still commit:
 * one of this database's client sessions that began at or before `$1` (the arming's time; NULL:
 * now) and holds an xid or a snapshot, or any prepared transaction of this database. Returns the
 * server's clock too, which the first call after an arming keeps as `$1` for the next ones.
 *
 * Why (issue 43, latency): the writer decides to NOTIFY in its INSERT, from the waiter rows its
 * snapshot sees (`laneInsert` above), so a transaction whose snapshot was taken before the
 * dispatcher armed sends none, and the dispatcher looks again every 1, 2, 4… ms while the horizon
 * says an id may still commit (lane-dispatcher.ts `#idleWaitMs`). At 1,000 messages a second
 * some writer is always in flight, and those looks were most of the lane reads and what the
 * wake-ups waited behind. A transaction that began after the arming committed takes every
 * snapshot after it, so it notifies: once none of the others is left, one more lane read finds
 * whatever they committed, and the looks stop until the next arming.
 *
 * Conservative where it cannot see: `xact_start` is NULL for another role's sessions unless the
 * dispatcher's role has `pg_read_all_stats` (counted as begun before), a REPEATABLE READ
 * transaction begun before keeps its snapshot (counted while it lasts, as it may still write),
 * and a prepared transaction is counted whenever it began. Background processes (autovacuum,
 * walsenders) write no lane message and are left out.
 */
export const lanePreArmWritersSql = `
SELECT clock_timestamp()::text AS now,
       EXISTS (
         SELECT 1 FROM pg_stat_get_activity(NULL) a
         WHERE a.datid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
           AND a.pid <> pg_backend_pid()
           AND (a.backend_type IS NULL OR a.backend_type = 'client backend')
           AND (a.backend_xid IS NOT NULL OR a.backend_xmin IS NOT NULL)
           AND (a.xact_start IS NULL OR a.xact_start <= coalesce($1::timestamptz, clock_timestamp())))
       OR EXISTS (SELECT 1 FROM pg_prepared_xacts p WHERE p.database = current_database())
         AS pending`;

/** Gives back every lane `$1` owns and forgets it (a graceful stop: others take them at once). */
export const laneLeaveSql = (s: string) => `
WITH gone AS (DELETE FROM ${s}.outbox_lane_owners WHERE owner = $1)
UPDATE ${s}.outbox_lanes SET owner = NULL, lease_expires_at = NULL WHERE owner = $1`;

/**
 * The writer's INSERT (createOutbox({ engine: 'lanes' })): one statement for the batch. Each
 * aggregate's counter row is upserted once, by how many messages it gets (`n`, on its first
 * message), in the order the writer sorted the batch (by aggregate: one lock order for every
 * writer, as insert-messages.ts), and a message's id is taken in the outer SELECT, which needs its
 * aggregate's counted row: so after that row is locked (see migration 024: id order is then
 * commit order within an aggregate, and the transaction has its xid). `r` is how many messages of
 * its aggregate follow it in the batch: its sequence is the counter's new value minus `r`.
 * The writer computes `n` and `r`: with window functions and a GROUP BY here (each a sort) the
 * statement took ~0.04 ms more a business transaction (0.197 vs 0.161 ms, best of 16 blocks).
 * No trigger and one index on the hot row: the enqueue the issue asks to make leaner.
 *
 * Since migration 026: `available_at` is set only for a message with a delay (`at`, else `d` >
 * 0, from the transaction's start as on the claim engine), NULL otherwise, so that the read
 * checks it only when set (sql/lanes.ts `outbox_lane_next`); `shadow` as written.
 */
export const insertLaneMessagesSql = (s: string) => laneInsert(s, false);

/**
 * The same INSERT for a batch with dedupe keys (migration 026): the keys were admitted first
 * (sql/dedupe.ts `admitLaneDedupeKeysSql`), each with its message id (`mi`), and the statement
 * writes each admitted key's row id and sequence into its `outbox_dedupe_keys` row, which the
 * admission left at id 0: a duplicate found later is answered with them. A separate text, as on
 * the claim engine: a batch without keys runs the statement above.
 */
export const insertKeyedLaneMessagesSql = (s: string) => laneInsert(s, true);

const laneInsert = (s: string, keyed: boolean) => `
WITH input AS (
  SELECT m.value AS v, m.position
  FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS m(value, position)
), counted AS (
  INSERT INTO ${s}.outbox_aggregates AS a (aggregate_id, last_sequence)
  SELECT i.v->>'a', (i.v->>'n')::bigint FROM input i WHERE i.v ? 'n' ORDER BY i.position
  ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + excluded.last_sequence
  RETURNING a.aggregate_id, a.last_sequence
), written AS (
INSERT INTO ${s}.outbox_lane_messages
  (lane, id, ${keyed ? 'message_id, ' : ''}aggregate_id, sequence, ordered, topic, payload, headers,
   available_at, shadow)
SELECT ${s}.outbox_lane_of(i.v->>'a'),
       nextval('${s}.outbox_lane_ids'),
       ${
         keyed
           ? `coalesce((i.v->>'mi')::uuid, ${s}.outbox_uuid_v7()),
       `
           : ''
       }i.v->>'a',
       c.last_sequence - (i.v->>'r')::bigint,
       coalesce((i.v->>'o')::boolean, NOT EXISTS (
         SELECT 1 FROM ${s}.outbox_unordered_topics u WHERE (i.v->>'t') LIKE u.pattern)),
       i.v->>'t',
       i.v->'p',
       coalesce(i.v->'h', '{}'::jsonb),
       CASE WHEN i.v->>'at' IS NOT NULL THEN (i.v->>'at')::timestamptz
            WHEN (i.v->>'d')::float8 > 0 THEN now() + (i.v->>'d')::float8 * interval '1 millisecond'
       END,
       coalesce((i.v->>'s')::boolean, false)
FROM input i JOIN counted c ON c.aggregate_id = i.v->>'a'
ORDER BY i.position
RETURNING id::text AS id,
          message_id::text AS "messageId",
          sequence::text AS sequence,
          topic,
          aggregate_id AS "aggregateId",
          lane,
          available_at IS NULL AS due
), woke AS (
  -- The LISTEN wake-up (migration 005's waiters, src/dispatcher/wake/listen-notify.ts): NOTIFY
  -- only while a dispatcher waits, sent at COMMIT; in the statement rather than a trigger (the
  -- claim engine's per-row deferred trigger is part of its enqueue cost). The payload names the
  -- messages due now, as lane:id (at most 64; else none): the dispatcher that owns a lane
  -- publishes those nothing can come before at once, read by primary key, instead of reading
  -- its lanes (lane-dispatcher.ts, #publishHinted). Only ids: any role that can LISTEN reads a
  -- payload.
  -- Per waiter, identical: PostgreSQL sends one.
  SELECT count(pg_notify('${notifyChannel(s.replace(/^"|"$/g, ''))}', coalesce((
           SELECT string_agg(q.lane || ':' || q.id, ',') FROM written q WHERE q.due
           HAVING count(*) <= 64), ''))) AS n
  FROM ${s}.outbox_waiters w WHERE w.expires_at > clock_timestamp()
)${
  keyed
    ? `, keys AS (
  UPDATE ${s}.outbox_dedupe_keys k SET id = w.id::bigint, sequence = w.sequence::bigint
  FROM written w JOIN input i ON (i.v->>'mi')::uuid = w."messageId"::uuid
  WHERE k.dedupe_key = i.v->>'k'
)
SELECT w.id, w."messageId", w.sequence, w.topic, w."aggregateId", i.v->>'k' AS "dedupeKey"
FROM written w CROSS JOIN woke LEFT JOIN input i ON (i.v->>'mi')::uuid = w."messageId"::uuid`
    : `
SELECT w.id, w."messageId", w.sequence, w.topic, w."aggregateId" FROM written w CROSS JOIN woke`
}`;

/**
 * What {@link lanePruneFunctionSql} would delete now (the dry run of `outbox prune`): consumed,
 * not yet pruned, older than $1 ms, not parked. Reads the consumed-and-unpruned range only.
 */
export const countLanePrunableSql = (s: string) => `
SELECT count(*)::bigint AS n, min(m.created_at) AS oldest
FROM ${s}.outbox_lanes l
JOIN ${s}.outbox_lane_messages m
  ON m.lane = l.lane AND m.id > l.pruned_to AND m.id <= l.cursor
WHERE m.created_at < now() - $1 * interval '1 millisecond'
  AND NOT EXISTS (SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = m.lane AND p.id = m.id)`;
