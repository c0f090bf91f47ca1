/**
 * The dispatched log (migration 018, issue 25): where a message goes when it is published.
 *
 * The settle used to UPDATE a published row in place (`dispatched_at = now()`): a non-HOT update,
 * since `dispatched_at` is in the predicate of every pending index, so one new heap version plus
 * an entry in the primary key, `outbox_message_id_key` and `outbox_dispatched_at_idx` — 374 WAL
 * bytes a message — and retention later deleted the row again: one more record per row and,
 * days later, a full-page image of every page it touched (268 bytes a message). Now the settle
 * DELETEs the row from `outbox` (one small record, no index touched: the pending indexes lose
 * their entries at vacuum) and INSERTs it, in the same statement, into the current table of a
 * ring of {@link RING_SLOTS} append-only tables, `outbox_dispatched_0..2`. Retention empties a
 * whole table with TRUNCATE (a few WAL records, whatever it held) instead of deleting rows.
 *
 * The ring (as PgQ rotates its event tables). `outbox_dispatched_ring` says which table the
 * settle writes. Retention ({@link pruneRingFunctionSql}, prune-outbox.ts) truncates a table once every
 * row in it is past the cut-off, and moves the settle on to an emptied table once the current
 * one's oldest row is older than half the cut-off. With three tables a dispatched message is kept
 * at least `--older-than` and at most about one and a half times that (each table covers about
 * half the retention period); a prune with a cut-off of 0 empties all three.
 *
 * Indexes, chosen by what they write per message: `id` and `message_id` are btrees, probed by the
 * CDC dispatcher (was a candidate settled by someone else, or is it not visible yet?) and by
 * effect status on every agent turn; both are time-ordered, so an insert is an append at the
 * right edge. `dispatched_at` is a BRIN index (the tables are append-only, so it follows the
 * physical order; a range is summarized when it fills up, by autovacuum, not at insert: a settle
 * writes nothing for it), for the dashboard's time windows. A BRIN on `id` was tried: its
 * unsummarized tail made every CDC probe a scan of the last minute's rows. Readers go through the view `outbox_messages` (every column of `outbox`, pending and
 * dispatched alike), or name the tables when a plan needs it.
 *
 * A column added to `outbox` later must be added to the three tables and to
 * {@link DISPATCHED_COLUMNS} in the same migration (the schema test compares them).
 */

/** How many tables the ring has. */
export const RING_SLOTS = 3;

/** The ring's tables, in slot order. */
export const ringTables = (s: string): string[] =>
  Array.from({ length: RING_SLOTS }, (_, k) => `${s}.outbox_dispatched_${k}`);

/** Every column of `outbox`, in its order (the tables are `LIKE outbox`). */
export const DISPATCHED_COLUMNS = [
  'id',
  'message_id',
  'aggregate_id',
  'topic',
  'payload',
  'headers',
  'sequence',
  'created_at',
  'available_at',
  'dispatched_at',
  'attempts',
  'last_error',
  'lease_owner',
  'lease_expires_at',
  'dead_lettered_at',
  'shadow',
  'ordered',
  'ready',
  'approval_state',
  'approval_expires_at',
  'approval_available_at',
  'approval_requested_by',
  'approval_decided_by',
  'approval_decided_at',
  'approval_note',
  'prev_id',
  'dedupe_key',
  'dedupe_expires_at',
  'approval_on_expiry',
] as const;

/**
 * What the settle writes for a row it deleted (alias `o`, from `DELETE ... RETURNING o.*`): the
 * row as it was, published now, without its lease.
 */
export const dispatchedValues = DISPATCHED_COLUMNS.map((c) =>
  c === 'dispatched_at'
    ? 'now()'
    : c === 'lease_owner' || c === 'lease_expires_at'
      ? 'NULL'
      : c === 'ready'
        ? 'false'
        : `o.${c}`,
).join(', ');

/** The ring's tables, their indexes, the ring row and the view (migration 018). */
export const dispatchedLogDdl = (s: string): string[] => [
  ...ringTables(s).flatMap((t, k) => [
    // fillfactor 100: nothing is ever updated in place. No default, no check, no trigger: what
    // lands here was checked when it entered the outbox.
    `CREATE TABLE ${t} (LIKE ${s}.outbox) WITH (fillfactor = 100)`,
    `CREATE INDEX outbox_dispatched_${k}_id_idx ON ${t} (id)`,
    `CREATE INDEX outbox_dispatched_${k}_message_id_idx ON ${t} (message_id)`,
    `CREATE INDEX outbox_dispatched_${k}_dispatched_at_idx ON ${t}
       USING brin (dispatched_at) WITH (pages_per_range = 16, autosummarize = on)`,
  ]),
  `CREATE TABLE ${s}.outbox_dispatched_ring (
     one boolean PRIMARY KEY DEFAULT true CHECK (one),
     slot smallint NOT NULL CHECK (slot >= 0 AND slot < ${RING_SLOTS}),
     rotated_at timestamptz NOT NULL DEFAULT now()
   )`,
  `INSERT INTO ${s}.outbox_dispatched_ring (slot) VALUES (0)`,
  messagesViewSql(s),
  pruneRingFunctionSql(s),
];

/** `outbox_messages`: the outbox and the ring as one relation, for readers of dispatched rows. */
export const messagesViewSql = (s: string) => `
CREATE VIEW ${s}.outbox_messages AS
SELECT * FROM ${s}.outbox
${ringTables(s)
  .map((t) => `UNION ALL SELECT * FROM ${t}`)
  .join('\n')}`;

/** Copies a whole table of the ring into `outbox_archive` (before its TRUNCATE). */
export const archiveSlotSql = (s: string, k: number) => `
INSERT INTO ${s}.outbox_archive
  (id, message_id, aggregate_id, topic, payload, headers, sequence,
   created_at, available_at, dispatched_at, attempts, last_error, shadow,
   approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
   approval_note, dedupe_key, approval_expires_at, approval_on_expiry)
SELECT id, message_id, aggregate_id, topic, payload, headers, sequence,
       created_at, available_at, dispatched_at, attempts, last_error, shadow,
       approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
       approval_note, dedupe_key, approval_expires_at, approval_on_expiry
FROM ${s}.outbox_dispatched_${k}
ON CONFLICT (id) DO NOTHING`;

/**
 * Retention of the ring, as one function call (one transaction, any executor): `outbox_prune_ring(
 * older_than_ms, archive, dry_run)` returns how many dispatched rows it removed (or would remove)
 * and the oldest one's `dispatched_at`.
 *
 * 1. Every table but the current one whose newest row is past the cut-off is emptied (archived
 *    first with `archive`). Its ACCESS EXCLUSIVE lock waits for a settle still writing it (one
 *    that read the ring before a rotation) and the newest row is read under that lock, so a row
 *    added meanwhile keeps the table.
 * 2. Once the current table's oldest row is older than half the cut-off, the settle moves on to an
 *    empty table; the one it leaves is emptied at once if all of it is past the cut-off (a cut-off
 *    of 0, or a dispatcher idle for longer than the retention).
 * `lock_timeout` 5 s: a long reader of `outbox_messages` makes the prune fail and retry later
 * rather than queue every reader behind it.
 */
export const pruneRingFunctionSql = (s: string) => `
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
  FOR k IN 0..${RING_SLOTS - 1} LOOP
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
          EXECUTE format(${archiveSlotTemplate(s)}, k);
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
    v_next := CASE WHEN v_empty[(v_current + 1) % ${RING_SLOTS} + 1] THEN (v_current + 1) % ${RING_SLOTS}
                   WHEN v_empty[(v_current + 2) % ${RING_SLOTS} + 1] THEN (v_current + 2) % ${RING_SLOTS} END;
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
              EXECUTE format(${archiveSlotTemplate(s)}, v_current);
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
$fn$`;

/** {@link archiveSlotSql} as a format() template literal (slot as %s) for the function above. */
const archiveSlotTemplate = (s: string) =>
  `'${archiveSlotSql(s, -1)
    .replace(`outbox_dispatched_-1`, 'outbox_dispatched_%s')
    .replace(/'/g, "''")}'`;

/** Calls {@link pruneRingFunctionSql}. $1 cut-off in ms, $2 archive, $3 dry run. */
export const pruneRingSql = (s: string) =>
  `SELECT n, oldest FROM ${s}.outbox_prune_ring($1::float8, $2::boolean, $3::boolean)`;
