/**
 * Fair shares between tenants on the lanes engine (migration 028; the claim engine's are in
 * tenant-claim.ts). A message's tenant is its `tenant_id` header, as there.
 *
 * A lane is read in id order after its cursor, so while tenant A's burst drains (30,000 messages
 * on 3,000 aggregates: every lane holds ~1,900 of them), tenant B's trickle waited behind A's
 * whole backlog in its lane. Now a FULL batch of `outbox_lane_next` (the only case where
 * something waits behind the batch) is followed by shares: for each of the caller's lanes, the
 * messages of tenants OTHER than the one at the lane's front, taken from further on in the lane,
 * published in the same batch AHEAD of the cursor. What was published ahead is recorded (one
 * row each in `outbox_lane_ahead`, written by the next call with the batch's outcome, like the
 * cursor moves), the lane reads skip those rows, and a cursor move deletes the ones it passes.
 * A's burst is never published ahead (it is at the front: the cursor serves it), so it writes
 * nothing per message; B's trickle writes one small row a message while it overtakes A.
 *
 * Per lane (`outbox_lane_shares`):
 *
 * 1. The tenants of the lane, round-robin from the caller's tenant cursor for the lane (the last
 *    tenant the previous share visited there), by a loose index scan of
 *    `outbox_lane_messages_tenant_idx` (lane, tenant, id): one descent per tenant, at most
 *    {@link TENANT_HOPS} tenants per lane and {@link TENANT_VISITS} per call. No tenant in the
 *    index (an outbox without tenants): one probe of an empty index per lane, nothing else.
 * 2. The lane's front, once a tenant was found: the first message after the position that was
 *    not published ahead (primary key). Its tenant, when more than a share of its messages wait
 *    in the lane (a burst), is served by the cursor and gets no share; with a share or less it
 *    gets one like the others (the lanes are read from where the last batch ended, so a lane
 *    whose burst has drained may wait for the others' before its cursor is read).
 * 3. For every other tenant: its first messages after the position, or after the last one it
 *    had published ahead in the lane (a backward probe of `outbox_lane_ahead_tenant_idx`), at
 *    most `share` (batch / 32) taken and 4 × share (16 at least) examined each: a message that
 *    must wait for the cursor does not stop the tenant's later aggregates (with one examined
 *    at a time, B's shares in a lane stopped at the first such message, lane-tenant-shares
 *    .test.ts), unless more of them than that lead the tenant's messages in the lane. A message is published ahead only when nothing of
 *    its aggregate can come before it (G4): it is not delayed, held or parked; unordered; or
 *    ordered with its aggregate not blocked by a parked message, and the first of its aggregate
 *    (sequence 1) or its predecessor (sequence - 1, by `outbox_lane_messages_tenant_seq_idx`)
 *    at or below the lane's position (published or parked: a parked one blocks), published
 *    ahead already, or returned before it by this share (the dispatcher publishes each
 *    aggregate in sequence order and stops it at its first failure). A predecessor not in that
 *    index (written without a tenant, or pruned) makes its successor wait for the cursor: never
 *    early, possibly later than a share would have.
 * 4. At most half the batch in shares per call.
 *
 * The call returns, after its marker `lane = -2`, the shares' messages and one row per lane
 * visited with `message_id` NULL and `topic` = the last tenant visited there (the next call's
 * cursor for the lane). The dispatcher drops a share's message that its batch holds already
 * (at or below how far the batch read the lane: the filling lane, whose end this function does
 * not know) and publishes the rest with the batch.
 *
 * Cost (G7): bounded by the batch, whatever waits: per lane at most {@link TENANT_HOPS} descents
 * of the tenant index, a primary-key descent for the front, and per visited tenant a backward
 * probe and `share` messages, each with at most three probes (parked, blocked, predecessor).
 * Consumed rows are not walked: each descent starts at its key (the tenant hop's `id >
 * pruned_to` is checked on the index entry, so a held snapshot costs a hop the pruned entries
 * it steps over, not their rows). Measured in test/integration/lanes/lane-tenant-shares-bound.
 * test.ts and bench `lanes_fair_share_p95_ms` (docs/destination-limits.md).
 *
 * Tried and rejected:
 * - A bounded look-ahead in id order (the next 4 × batch rows of the lane): B's message sits
 *   after A's whole backlog in id order, so no bounded window reaches it.
 * - Giving every tenant a share, the front one included (the claim engine's rule): A's burst is
 *   then published ahead in the lanes the batch did not reach, a row of `outbox_lane_ahead` a
 *   message. Measured, a drain of 20,000 of one tenant: 1,605 rows written and 0.78 s, against
 *   none and 0.29 s.
 * - No share at all for the front tenant: a lane whose burst has drained waits for the batch to
 *   come round to it (the lanes are read from where the last batch ended), and B's message at
 *   its front with it: B's commit -> publish went up to 0.9-1.1 s beside A's 12,000 (max 22-37
 *   ms with a share for a front tenant with a share or less waiting; lane-tenant-shares.test.ts).
 * - Letting the planner pick the probes of `outbox_lane_ahead`: it made the front's NOT EXISTS
 *   an anti-join that read the lane's whole table, under a held snapshot every forgotten row
 *   (2,063 buffers a call; 4,572 as a materialized nested loop): OFFSET 0 keeps each a probe.
 * - Counting tenants with nothing after the position against a lane's visits: 400 tenants seen
 *   before used them up, and B got shares in half the lanes of a call (16 of 32).
 * - Finding a predecessor by walking the tenant's rows from the position: grows with the
 *   tenant's backlog; the sequence index is one descent.
 */

/** Tenants with messages after the position given a share per lane and call at most. */
export const TENANT_SHARES = 4;
/** Tenants looked at per lane and call at most (those with nothing after the position too). */
export const TENANT_HOPS = 8;
/** Tenants looked at per call at most (over all lanes). */
export const TENANT_VISITS = 128;

const TENANT = `(m.headers ->> 'tenant_id')`;

/** `outbox_lane_shares` (migration 028): see the comment above. */
export const laneSharesFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_shares(
  p_lanes smallint[], p_after bigint[], p_pruned bigint[], p_tenants text[], p_batch integer)
RETURNS TABLE (lane smallint, id bigint, message_id uuid, aggregate_id text, sequence bigint,
               ordered boolean, topic text, payload jsonb, headers jsonb, created_ms float8,
               shadow boolean)
-- Every probe a descent of its index: the planner turned the front's NOT EXISTS into an
-- anti-join that read the lane's whole outbox_lane_ahead (under a held snapshot, every row
-- forgotten: 2,063 buffers a call after 40,000 messages; lane-tenant-shares-bound.test.ts).
-- With hash and merge joins off it was a nested loop over the same scan, materialized (4,572):
-- the probes of outbox_lane_ahead carry OFFSET 0, which keeps them subplans run per row.
LANGUAGE plpgsql SET jit = off SET enable_bitmapscan = off SET enable_seqscan = off
  SET enable_hashjoin = off SET enable_mergejoin = off AS $$
#variable_conflict use_column
DECLARE
  v_left integer := greatest(1, p_batch / 2);
  v_share integer := greatest(1, p_batch / 32);
  v_visits integer := ${TENANT_VISITS};
  v_lane record;
  v_row record;
  v_front text;
  v_front_found boolean;
  v_tenant text;
  v_next text;
  v_wrapped boolean;
  v_hops integer;
  v_shared integer;
  v_taken integer;
  v_from bigint;
  v_pred bigint;
  v_ok boolean;
  v_ids bigint[];
BEGIN
  FOR v_lane IN
    SELECT x.no, x.after, x.pruned, x.tenant
    FROM unnest(p_lanes, p_after, p_pruned, p_tenants) AS x (no, after, pruned, tenant)
  LOOP
    EXIT WHEN v_left <= 0 OR v_visits <= 0;
    v_tenant := v_lane.tenant;
    v_wrapped := v_tenant IS NULL;
    v_hops := 0;
    v_shared := 0;
    v_front_found := false;
    v_ids := '{}';
    LOOP
      EXIT WHEN v_hops >= ${TENANT_HOPS} OR v_shared >= ${TENANT_SHARES} OR v_left <= 0
        OR v_visits <= 0;
      -- The next tenant of the lane after v_tenant: one descent of the tenant index. The
      -- pruned entries (dead, kept by a held snapshot) are stepped over on the index entry.
      IF v_tenant IS NULL THEN
        SELECT ${TENANT} INTO v_next FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND ${TENANT} IS NOT NULL AND m.id > v_lane.pruned
        ORDER BY ${TENANT} LIMIT 1;
      ELSE
        SELECT ${TENANT} INTO v_next FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND ${TENANT} > v_tenant AND m.id > v_lane.pruned
        ORDER BY ${TENANT} LIMIT 1;
      END IF;
      IF NOT FOUND OR (v_wrapped AND v_lane.tenant IS NOT NULL AND v_next > v_lane.tenant) THEN
        -- Past the last tenant: once round from the first, up to where this call started.
        EXIT WHEN v_wrapped;
        v_wrapped := true;
        v_tenant := NULL;
        CONTINUE;
      END IF;
      v_hops := v_hops + 1;
      v_visits := v_visits - 1;
      v_tenant := v_next;
      IF NOT v_front_found THEN
        SELECT ${TENANT} INTO v_front FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND m.id > v_lane.after
          AND NOT EXISTS (
            SELECT 1 FROM ${s}.outbox_lane_ahead a WHERE a.lane = m.lane AND a.id = m.id OFFSET 0)
        ORDER BY m.id LIMIT 1;
        EXIT WHEN NOT FOUND; -- nothing after the position
        v_front_found := true;
      END IF;
      -- After what this tenant had published ahead in the lane already.
      SELECT greatest(v_lane.after, max(a.id)) INTO v_from FROM ${s}.outbox_lane_ahead a
      WHERE a.lane = v_lane.no AND a.tenant = v_next AND a.id > v_lane.after;
      -- The tenant at the lane's front with more than a share waiting there (a burst): the
      -- cursor serves it, no share (a row written a message of a burst otherwise). With a
      -- share or less, it has one: the batch may not reach this lane (the lanes are read from
      -- where the last batch ended).
      CONTINUE WHEN v_next = v_front AND EXISTS (
        SELECT 1 FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND ${TENANT} = v_next AND m.id > v_from
        ORDER BY m.id OFFSET v_share LIMIT 1);
      -- Nothing of this tenant after the position (a tenant seen before): next.
      CONTINUE WHEN NOT EXISTS (
        SELECT 1 FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND ${TENANT} = v_next AND m.id > v_from);
      v_shared := v_shared + 1;
      v_taken := 0;
      FOR v_row IN
        SELECT m.lane, m.id, m.message_id, m.aggregate_id, m.sequence, m.ordered, m.topic,
               m.payload, m.headers, extract(epoch FROM m.created_at)::float8 * 1000 AS created_ms,
               m.shadow, m.available_at
        FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND ${TENANT} = v_next AND m.id > v_from
        -- Up to 4 shares' worth examined (16 at least): a message that must wait for the
        -- cursor (its predecessor unknown) does not stop the tenant's later aggregates.
        ORDER BY m.id LIMIT greatest(16, 4 * v_share)
      LOOP
        IF v_row.available_at IS NOT NULL OR EXISTS (
             SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = v_row.lane AND p.id = v_row.id)
        THEN
          v_ok := false;
        ELSIF NOT v_row.ordered THEN
          v_ok := true;
        ELSIF EXISTS (
          SELECT 1 FROM ${s}.outbox_lane_parked p
          WHERE p.lane = v_row.lane AND p.aggregate_id = v_row.aggregate_id AND p.blocks) THEN
          v_ok := false;
        ELSIF v_row.sequence = 1 THEN
          v_ok := true;
        ELSE
          SELECT m.id INTO v_pred FROM ${s}.outbox_lane_messages m
          WHERE m.lane = v_row.lane AND m.aggregate_id = v_row.aggregate_id
            AND m.sequence = v_row.sequence - 1 AND ${TENANT} IS NOT NULL;
          v_ok := FOUND AND (v_pred <= v_lane.after OR v_pred = ANY (v_ids) OR EXISTS (
            SELECT 1 FROM ${s}.outbox_lane_ahead a WHERE a.lane = v_row.lane AND a.id = v_pred));
        END IF;
        CONTINUE WHEN NOT v_ok;
        lane := v_row.lane; id := v_row.id; message_id := v_row.message_id;
        aggregate_id := v_row.aggregate_id; sequence := v_row.sequence;
        ordered := v_row.ordered; topic := v_row.topic; payload := v_row.payload;
        headers := v_row.headers; created_ms := v_row.created_ms; shadow := v_row.shadow;
        RETURN NEXT;
        v_ids := v_ids || v_row.id;
        v_taken := v_taken + 1;
        v_left := v_left - 1;
        EXIT WHEN v_left <= 0 OR v_taken >= v_share;
      END LOOP;
    END LOOP;
    IF v_hops > 0 THEN
      lane := v_lane.no; id := NULL; message_id := NULL; aggregate_id := NULL; sequence := NULL;
      ordered := NULL; topic := v_tenant; payload := NULL; headers := NULL; created_ms := NULL;
      shadow := NULL;
      RETURN NEXT;
    END IF;
  END LOOP;
END $$`;
