// The function of migration 033 that a later migration replaced (`outbox_lane_prune` with three
// arguments: 034), as 033 created it: migrations are append-only (src/sql/lane-archive.ts holds
// the current text).

/** `outbox_lane_prune(float8, integer, boolean)` as migration 033 created it. */
export const lanePruneArchiveFunction033 = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_prune(p_older_than_ms float8, p_limit integer,
  p_archive boolean) RETURNS bigint
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
    IF p_archive THEN
      WITH gone AS (
        DELETE FROM ${s}.outbox_lane_messages m
        WHERE m.lane = v_lane.no AND m.id > v_lane.pruned_to AND m.id <= v_to
          AND NOT EXISTS (
            SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = m.lane AND p.id = m.id)
        RETURNING m.*
      ), moved AS (
INSERT INTO ${s}.outbox_lane_archive
  (lane, id, message_id, aggregate_id, sequence, ordered, topic, payload, headers, created_at,
   available_at, shadow, approval_state, approval_requested_by, approval_decided_by,
   approval_decided_at, approval_note)
SELECT g.lane, g.id, g.message_id, g.aggregate_id, g.sequence, g.ordered, g.topic, g.payload,
       g.headers, g.created_at, g.available_at, g.shadow, a.state, a.requested_by, a.decided_by,
       a.decided_at, a.note
FROM gone g
LEFT JOIN ${s}.outbox_lane_approvals a ON a.id = g.id AND a.lane = g.lane
ON CONFLICT (lane, id) DO NOTHING
RETURNING 1)
      SELECT count(*) INTO v_n FROM gone;
    ELSE
      DELETE FROM ${s}.outbox_lane_messages m
      WHERE m.lane = v_lane.no AND m.id > v_lane.pruned_to AND m.id <= v_to
        AND NOT EXISTS (
          SELECT 1 FROM ${s}.outbox_lane_parked p WHERE p.lane = m.lane AND p.id = m.id);
      GET DIAGNOSTICS v_n = ROW_COUNT;
    END IF;
    v_total := v_total + v_n;
    UPDATE ${s}.outbox_lanes l SET pruned_to = v_to, archive_passed = p_archive
    WHERE l.lane = v_lane.no AND l.pruned_to < v_to;
  END LOOP;
  RETURN v_total;
END $$`;
