/**
 * Retention with `archive: true` on the lanes engine (migration 033): consumed lane messages
 * move to `outbox_lane_archive` instead of being deleted, as the claim engine's move to
 * `outbox_archive` (sql/retention.ts `archiveDispatchedBatchSql`).
 *
 * Why a table of its own rather than `outbox_archive`: that table's key is the claim engine's
 * `id`, and lane ids come from another sequence (`outbox_lane_ids`), so a lane message could
 * meet a claim message's id there; its columns are the claim engine's (`dispatched_at`, which
 * the lanes engine does not record). Keyed `(lane, id)` as `outbox_lane_messages`, with the
 * message's columns and its approval decision (migration 027) when it had one, so that the
 * decision rows can be pruned with their messages as on a deleting prune.
 */
export const laneArchiveTableSql = (s: string) => `
CREATE TABLE ${s}.outbox_lane_archive (
  lane                  smallint    NOT NULL,
  id                    bigint      NOT NULL,
  message_id            uuid        NOT NULL,
  aggregate_id          text        NOT NULL,
  sequence              bigint      NOT NULL,
  ordered               boolean     NOT NULL,
  topic                 text        NOT NULL,
  payload               jsonb       NOT NULL,
  headers               jsonb       NOT NULL,
  created_at            timestamptz NOT NULL,
  available_at          timestamptz,
  shadow                boolean     NOT NULL,
  approval_state        text,
  approval_requested_by text,
  approval_decided_by   text,
  approval_decided_at   timestamptz,
  approval_note         text,
  archived_at           timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (lane, id)
)`;

/**
 * What the archive keeps of a deleted lane message (`g`, the DELETE's RETURNING m.*) and its
 * decision row (`a`, or NULLs). One text for both places that delete consumed messages.
 */
const archived = (s: string, from: string) => `
INSERT INTO ${s}.outbox_lane_archive
  (lane, id, message_id, aggregate_id, sequence, ordered, topic, payload, headers, created_at,
   available_at, shadow, approval_state, approval_requested_by, approval_decided_by,
   approval_decided_at, approval_note)
SELECT g.lane, g.id, g.message_id, g.aggregate_id, g.sequence, g.ordered, g.topic, g.payload,
       g.headers, g.created_at, g.available_at, g.shadow, a.state, a.requested_by, a.decided_by,
       a.decided_at, a.note
FROM ${from} g
LEFT JOIN ${s}.outbox_lane_approvals a ON a.id = g.id AND a.lane = g.lane
ON CONFLICT (lane, id) DO NOTHING
RETURNING 1`;

/**
 * The first change to a page after a checkpoint logs the whole page (a full-page image), and
 * retention changes pages written long before, after many checkpoints: each page of consumed
 * messages it deletes costs a page of WAL. Measured (bench/cases/pgq.ts, `details.pgq.wal
 * .withRetention`, 2026-12-06): 301 bytes of WAL a message for retention, 216 of them images
 * (about 40 messages a page) — what kept `wal_per_message_ratio` at 0.461 on the lanes engine
 * against a target of 0.35; with `wal_compression = lz4` the images were 55 bytes a message.
 *
 * So the prune asks for `wal_compression` for its own statement when the server has it off:
 * `lz4`, else `pglz` (a server built without lz4), else `on` (before PostgreSQL 15, when the
 * setting was a boolean). The function's `SET jit` clause makes PostgreSQL restore every setting
 * the function changed when it returns (set_config's `is_local` change ends with the function),
 * so nothing else of the caller's session or transaction is compressed. Changing the setting
 * needs superuser or, from PostgreSQL 15, `GRANT SET ON PARAMETER wal_compression`: without it
 * the prune runs as before, uncompressed, and says nothing (a retention job must not fail over
 * it). An operator who set `wal_compression` keeps their choice; `agent_outbox
 * .prune_wal_compression = off` (a role's or database's setting) turns this off.
 *
 * Rejected: rotating the table and TRUNCATEing it as PgQ does (its retention writes next to
 * nothing): parked messages would have to leave the partitions first and the primary key and
 * the `message_id` index change shape on a table writers insert into; not done yet.
 */
const pruneWalCompression = `  IF current_setting('wal_compression') IN ('off', 'false')
     AND coalesce(current_setting('agent_outbox.prune_wal_compression', true), '')
         NOT IN ('off', 'false', '0') THEN
    BEGIN
      BEGIN
        PERFORM set_config('wal_compression', 'lz4', true);
      EXCEPTION WHEN invalid_parameter_value THEN
        BEGIN
          PERFORM set_config('wal_compression', 'pglz', true);
        EXCEPTION WHEN invalid_parameter_value THEN
          PERFORM set_config('wal_compression', 'on', true);
        END;
      END;
    EXCEPTION WHEN insufficient_privilege OR invalid_parameter_value THEN
      NULL;
    END;
  END IF;`;

/**
 * Retention of the lanes engine with a choice (migration 033): `outbox_lane_prune` of migration
 * 024 (`p_archive` false) or the same walk moving what it deletes to `outbox_lane_archive`.
 * A new overload: the two-argument function stays as 024 made it, for retention jobs of earlier
 * versions during a rolling upgrade.
 *
 * The walk is 024's (each lane from `pruned_to`, never again over what earlier prunes deleted:
 * its cost does not grow with history, also under a held snapshot). Parked messages stay, as
 * before; what retention passed while it was parked goes when it is published
 * (`outbox_lane_settle_parked`), into the archive when the prune that passed it archived: each
 * lane remembers it (`outbox_lanes.archive_passed`, the last prune's choice).
 *
 * Since migration 034 it compresses the full-page images its DELETEs write
 * ({@link pruneWalCompression}).
 */
export const lanePruneArchiveFunctionSql = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_lane_prune(p_older_than_ms float8, p_limit integer,
  p_archive boolean) RETURNS bigint
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v_lane record;
  v_to bigint;
  v_n bigint;
  v_total bigint := 0;
BEGIN
${pruneWalCompression}
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
      ), moved AS (${archived(s, 'gone')})
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

/** One retention call of {@link lanePruneArchiveFunctionSql}: $1 age in ms, $2 rows a lane, $3 archive. */
export const lanePruneArchiveSql = (s: string) =>
  `SELECT ${s}.outbox_lane_prune($1::float8, $2::integer, $3::boolean) AS n`;

/**
 * The end of `outbox_lane_settle_parked` (sql/lanes.ts) since migration 033: messages retention
 * passed while they were parked go once published, into the archive when the lane's last prune
 * archived.
 */
export const passedPublishedSql = (s: string) => `
  WITH gone AS (
    DELETE FROM ${s}.outbox_lane_messages m
    USING unnest(p_lanes, p_ids, p_kinds) AS f (lane, id, kind), ${s}.outbox_lanes l
    WHERE f.kind = 'published' AND m.lane = f.lane AND m.id = f.id
      AND l.lane = f.lane AND f.id <= l.pruned_to
    RETURNING m.*, l.archive_passed
  ), kept AS (SELECT * FROM gone WHERE archive_passed
  ), moved AS (${archived(s, 'kept')})
  SELECT count(*) INTO v_passed FROM gone;`;
