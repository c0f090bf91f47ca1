// Frozen text of what migration 018 created from sql/dispatched-log.ts (released): do not edit.
// Migration 021 re-creates the view and the retention function (the batched log).
export const dispatchedLogDdl018 = (s: string): string[] => [
  `CREATE TABLE ${s}.outbox_dispatched_0 (LIKE ${s}.outbox) WITH (fillfactor = 100)`,
  `CREATE INDEX outbox_dispatched_0_id_idx ON ${s}.outbox_dispatched_0 (id)`,
  `CREATE INDEX outbox_dispatched_0_message_id_idx ON ${s}.outbox_dispatched_0 (message_id)`,
  `CREATE INDEX outbox_dispatched_0_dispatched_at_idx ON ${s}.outbox_dispatched_0
       USING brin (dispatched_at) WITH (pages_per_range = 16, autosummarize = on)`,
  `CREATE TABLE ${s}.outbox_dispatched_1 (LIKE ${s}.outbox) WITH (fillfactor = 100)`,
  `CREATE INDEX outbox_dispatched_1_id_idx ON ${s}.outbox_dispatched_1 (id)`,
  `CREATE INDEX outbox_dispatched_1_message_id_idx ON ${s}.outbox_dispatched_1 (message_id)`,
  `CREATE INDEX outbox_dispatched_1_dispatched_at_idx ON ${s}.outbox_dispatched_1
       USING brin (dispatched_at) WITH (pages_per_range = 16, autosummarize = on)`,
  `CREATE TABLE ${s}.outbox_dispatched_2 (LIKE ${s}.outbox) WITH (fillfactor = 100)`,
  `CREATE INDEX outbox_dispatched_2_id_idx ON ${s}.outbox_dispatched_2 (id)`,
  `CREATE INDEX outbox_dispatched_2_message_id_idx ON ${s}.outbox_dispatched_2 (message_id)`,
  `CREATE INDEX outbox_dispatched_2_dispatched_at_idx ON ${s}.outbox_dispatched_2
       USING brin (dispatched_at) WITH (pages_per_range = 16, autosummarize = on)`,
  `CREATE TABLE ${s}.outbox_dispatched_ring (
     one boolean PRIMARY KEY DEFAULT true CHECK (one),
     slot smallint NOT NULL CHECK (slot >= 0 AND slot < 3),
     rotated_at timestamptz NOT NULL DEFAULT now()
   )`,
  `INSERT INTO ${s}.outbox_dispatched_ring (slot) VALUES (0)`,
  `
CREATE VIEW ${s}.outbox_messages AS
SELECT * FROM ${s}.outbox
UNION ALL SELECT * FROM ${s}.outbox_dispatched_0
UNION ALL SELECT * FROM ${s}.outbox_dispatched_1
UNION ALL SELECT * FROM ${s}.outbox_dispatched_2`,
  `
CREATE OR REPLACE FUNCTION ${s}.outbox_prune_ring(
  p_older_than_ms float8, p_archive boolean, p_dry_run boolean)
RETURNS TABLE (n int, oldest timestamptz)
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_cut timestamptz := now() - p_older_than_ms * interval '1 millisecond';
  v_half timestamptz := now() - p_older_than_ms / 2 * interval '1 millisecond';
  v_current int;
  v_next int;
  v_n int;
  v_min timestamptz;
  v_max timestamptz;
  v_total int := 0;
  v_oldest timestamptz;
  v_empty boolean[] := ARRAY[false, false, false];
BEGIN
  IF NOT p_dry_run THEN
    PERFORM set_config('lock_timeout', '5s', true);
    SELECT r.slot INTO v_current FROM ${s}.outbox_dispatched_ring r FOR UPDATE;
  ELSE
    SELECT r.slot INTO v_current FROM ${s}.outbox_dispatched_ring r;
  END IF;
  FOR k IN 0..2 LOOP
    CONTINUE WHEN k = v_current;
    IF NOT p_dry_run THEN
      EXECUTE format('LOCK TABLE ${s}.outbox_dispatched_%s IN ACCESS EXCLUSIVE MODE', k);
    END IF;
    EXECUTE format('SELECT count(*)::int, min(dispatched_at), max(dispatched_at) FROM ${s}.outbox_dispatched_%s', k)
      INTO v_n, v_min, v_max;
    IF v_n = 0 THEN
      v_empty[k + 1] := true;
    ELSIF v_max < v_cut THEN
      IF NOT p_dry_run THEN
        IF p_archive THEN
          EXECUTE format('
INSERT INTO ${s}.outbox_archive
  (id, message_id, aggregate_id, topic, payload, headers, sequence,
   created_at, available_at, dispatched_at, attempts, last_error, shadow,
   approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
   approval_note, dedupe_key, approval_expires_at, approval_on_expiry)
SELECT id, message_id, aggregate_id, topic, payload, headers, sequence,
       created_at, available_at, dispatched_at, attempts, last_error, shadow,
       approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
       approval_note, dedupe_key, approval_expires_at, approval_on_expiry
FROM ${s}.outbox_dispatched_%s
ON CONFLICT (id) DO NOTHING', k);
        END IF;
        EXECUTE format('TRUNCATE ${s}.outbox_dispatched_%s', k);
      END IF;
      v_empty[k + 1] := true;
      v_total := v_total + v_n;
      v_oldest := least(v_oldest, v_min);
    END IF;
  END LOOP;
  EXECUTE format('SELECT count(*)::int, min(dispatched_at), max(dispatched_at) FROM ${s}.outbox_dispatched_%s', v_current)
    INTO v_n, v_min, v_max;
  IF v_n > 0 AND v_min < v_half THEN
    v_next := CASE WHEN v_empty[(v_current + 1) % 3 + 1] THEN (v_current + 1) % 3
                   WHEN v_empty[(v_current + 2) % 3 + 1] THEN (v_current + 2) % 3 END;
    IF v_next IS NOT NULL THEN
      IF NOT p_dry_run THEN
        UPDATE ${s}.outbox_dispatched_ring SET slot = v_next, rotated_at = now();
      END IF;
      IF v_max < v_cut THEN
        IF NOT p_dry_run THEN
          EXECUTE format('LOCK TABLE ${s}.outbox_dispatched_%s IN ACCESS EXCLUSIVE MODE', v_current);
          EXECUTE format('SELECT count(*)::int, min(dispatched_at), max(dispatched_at) FROM ${s}.outbox_dispatched_%s', v_current)
            INTO v_n, v_min, v_max;
        END IF;
        IF v_n > 0 AND v_max < v_cut THEN
          IF NOT p_dry_run THEN
            IF p_archive THEN
              EXECUTE format('
INSERT INTO ${s}.outbox_archive
  (id, message_id, aggregate_id, topic, payload, headers, sequence,
   created_at, available_at, dispatched_at, attempts, last_error, shadow,
   approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
   approval_note, dedupe_key, approval_expires_at, approval_on_expiry)
SELECT id, message_id, aggregate_id, topic, payload, headers, sequence,
       created_at, available_at, dispatched_at, attempts, last_error, shadow,
       approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
       approval_note, dedupe_key, approval_expires_at, approval_on_expiry
FROM ${s}.outbox_dispatched_%s
ON CONFLICT (id) DO NOTHING', v_current);
            END IF;
            EXECUTE format('TRUNCATE ${s}.outbox_dispatched_%s', v_current);
          END IF;
          v_total := v_total + v_n;
          v_oldest := least(v_oldest, v_min);
        END IF;
      END IF;
    END IF;
  END IF;
  RETURN QUERY SELECT v_total, v_oldest;
END
$fn$`,
];
