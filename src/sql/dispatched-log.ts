/**
 * The dispatched log (migrations 018 and 021, issue 25): where a message goes when it is published.
 *
 * The settle used to UPDATE a published row in place (`dispatched_at = now()`): a non-HOT update,
 * since `dispatched_at` is in the predicate of every pending index, so one new heap version plus
 * an entry in the primary key, `outbox_message_id_key` and `outbox_dispatched_at_idx` — 374 WAL
 * bytes a message — and retention later deleted the row again: one more record per row and,
 * days later, a full-page image of every page it touched (268 bytes a message). Since migration
 * 018 the settle DELETEs the row from `outbox` (one small record, no index touched: the pending
 * indexes lose their entries at vacuum) and appends it, in the same statement, to the current
 * table of a ring of {@link RING_SLOTS} append-only tables. Retention empties a whole table with
 * TRUNCATE (a few WAL records, whatever it held) instead of deleting rows.
 *
 * Batches (migration 021). Migration 018 appended one row per message (`outbox_dispatched_0..2`):
 * a heap tuple and an entry in two btrees, 364 of the 667 WAL bytes a dispatch wrote per message
 * (bench `wal_per_message_ratio` 0.71: more than half a second enqueue). Now a settle appends ONE
 * row per run of ids it settled (`outbox_dispatched_batch_0..2`): the messages as an array of
 * `outbox_dispatched_message` (a composite type with the outbox's columns: each row as settled),
 * which PostgreSQL compresses and stores out of line in a few TOAST chunks, with the range of
 * their ids and of their message ids and how many they are. 5,000 messages of the WAL bench:
 * dispatch ~650 → 313 bytes a message (ratio ~0.70 → 0.34). Tried: a jsonb array (`to_jsonb`
 * of each row: 0.36, but formatting and compressing text made a settle of 200 take 8.3 ms
 * instead of 3.6); an array of the outbox's own row type (0.33 too, but a column of that type
 * forbids every later ALTER TABLE of `outbox`, where `ALTER TYPE ... ADD ATTRIBUTE` works on a
 * type of its own); lz4 instead of pglz (the same size here). Rows settled before migration 021
 * stay in the per-message tables, read as before, until retention empties them.
 *
 * A batch is cut where the ids jump by more than {@link BATCH_ID_GAP} (a message retried long after
 * its neighbours went out lands in a batch of its own), so a batch's id range stays narrow and a
 * lookup by id or message id (effect status on every agent turn, the CDC dispatcher's probe,
 * approvals) meets the one or few batches whose ranges hold it, through a GiST index on each
 * range, and reads one array. Both ids are time-ordered (a sequence; UUIDv7 since migration 007).
 * Lookups go through {@link dispatchedByIdSql} / {@link dispatchedByMessageIdSql} (functions over
 * every table of the log); time windows (the dashboard) through the view `outbox_messages`, whose
 * batch branches expose the batch's `dispatched_at`, so a window on it is pushed down to the
 * btree on that column.
 *
 * The ring (as PgQ rotates its event tables). `outbox_dispatched_ring` says which slot the
 * settle writes. Retention ({@link pruneRingFunctionSql}, prune-outbox.ts) truncates a slot's two
 * tables once every row in them is past the cut-off, and moves the settle on to an emptied slot
 * once the current one's oldest row is older than half the cut-off. With three slots a
 * dispatched message is kept at least `--older-than` and at most about one and a half times that
 * (each slot covers about half the retention period); a prune with a cut-off of 0 empties all
 * three.
 *
 * A column added to `outbox` later must be added to the three per-message tables, to
 * `outbox_dispatched_message` (`ALTER TYPE ... ADD ATTRIBUTE`: messages stored before read it as
 * NULL) and to {@link DISPATCHED_COLUMNS}, and the view, the lookup functions and the settle
 * re-created, in the same migration (the schema test compares them).
 */

/** How many tables the ring has. */
export const RING_SLOTS = 3;

/** The ring's per-message tables (migration 018), in slot order: read, no longer written. */
export const ringTables = (s: string): string[] =>
  Array.from({ length: RING_SLOTS }, (_, k) => `${s}.outbox_dispatched_${k}`);

/** The ring's batch tables (migration 021), in slot order: what the settle writes. */
export const batchTables = (s: string): string[] =>
  Array.from({ length: RING_SLOTS }, (_, k) => `${s}.outbox_dispatched_batch_${k}`);

/**
 * A settle starts a new batch where the next id is more than this above the last one. Ids come
 * from one sequence, so the messages of a claim are mostly consecutive; runs of a few aggregates
 * (the runs-first claim) are spread over the backlog but still close. 1,000 keeps a batch's range
 * within about 200,000 ids in the worst case and one batch per settle in the common one.
 */
export const BATCH_ID_GAP = 1000;

/** Every column of `outbox`, in its order (the per-message tables are `LIKE outbox`). */
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

/** The type of each of {@link DISPATCHED_COLUMNS}, for the batch's message type. */
const DISPATCHED_TYPES: Record<(typeof DISPATCHED_COLUMNS)[number], string> = {
  id: 'bigint',
  message_id: 'uuid',
  aggregate_id: 'text',
  topic: 'text',
  payload: 'jsonb',
  headers: 'jsonb',
  sequence: 'bigint',
  created_at: 'timestamptz',
  available_at: 'timestamptz',
  dispatched_at: 'timestamptz',
  attempts: 'int',
  last_error: 'text',
  lease_owner: 'text',
  lease_expires_at: 'timestamptz',
  dead_lettered_at: 'timestamptz',
  shadow: 'boolean',
  ordered: 'boolean',
  ready: 'boolean',
  approval_state: 'text',
  approval_expires_at: 'timestamptz',
  approval_available_at: 'timestamptz',
  approval_requested_by: 'text',
  approval_decided_by: 'text',
  approval_decided_at: 'timestamptz',
  approval_note: 'text',
  prev_id: 'bigint',
  dedupe_key: 'text',
  dedupe_expires_at: 'timestamptz',
  approval_on_expiry: 'text',
};

/**
 * What the settle writes for a row it deleted (alias `o`, from `DELETE ... RETURNING o.*`): the
 * row as it was, published now, without its lease.
 */
const dispatchedValues = DISPATCHED_COLUMNS.map((c) =>
  c === 'dispatched_at'
    ? 'now()'
    : c === 'lease_owner' || c === 'lease_expires_at'
      ? 'NULL'
      : c === 'ready'
        ? 'false'
        : `o.${c}`,
).join(', ');

/**
 * The settle's append (a data-modifying CTE body, after `moved`: the rows it DELETEd, alias `o`)
 * to the batch table `log`: one row per run of ids without a jump over {@link BATCH_ID_GAP}, each
 * message as it was, published now, without its lease. Nothing when nothing moved (`GROUP BY` of
 * no rows makes no group). There is no min() of uuid: the first and last of the sorted array.
 */
export const batchLogSql = (s: string, log: string) => `INSERT INTO ${log}
    (ids, message_ids, dispatched_at, message_count, messages)
  SELECT int8range(min(g.id), max(g.id), '[]'),
         ${s}.outbox_uuid_range((array_agg(g.message_id ORDER BY g.message_id))[1],
                                (array_agg(g.message_id ORDER BY g.message_id DESC))[1], '[]'),
         now(), count(*)::int,
         array_agg(g.message ORDER BY g.id)
  FROM (
    SELECT j.id, j.message_id, j.message, count(*) FILTER (WHERE j.jump) OVER (ORDER BY j.id) AS batch
    FROM (
      SELECT o.id, o.message_id,
             ROW(${dispatchedValues})::${s}.outbox_dispatched_message AS message,
             coalesce(o.id - lag(o.id) OVER (ORDER BY o.id) > ${BATCH_ID_GAP}, false) AS jump
      FROM moved o
    ) j
  ) g
  GROUP BY g.batch`;

/** The messages of batch table alias `b`, as rows with the columns of `outbox` (alias `m`). */
const batchRows = `CROSS JOIN LATERAL unnest(b.messages) m`;

/**
 * `outbox_messages`: the outbox and the ring as one relation, for readers of dispatched rows. The
 * batch branches take `dispatched_at` from the batch row, so a condition on it is pushed down to
 * that table's index (the dashboard's windows) instead of opening every batch.
 */
export const messagesViewSql = (s: string) => `
CREATE OR REPLACE VIEW ${s}.outbox_messages AS
SELECT * FROM ${s}.outbox
${ringTables(s)
  .map((t) => `UNION ALL SELECT * FROM ${t}`)
  .join('\n')}
${batchTables(s)
  .map(
    (t) => `UNION ALL
SELECT ${DISPATCHED_COLUMNS.map((c) => (c === 'dispatched_at' ? 'b.dispatched_at' : `m.${c}`)).join(', ')}
FROM ${t} b ${batchRows}`,
  )
  .join('\n')}`;

/**
 * `outbox_dispatched_by_id(bigint[])`: the dispatched messages with these ids, from every table of
 * the log: the per-message tables by their btree on `id`, the batches whose id range holds one
 * (GiST), opened and filtered. Bounded by the ids asked for, never by the history. A SQL function
 * `SET enable_seqscan = off` (not inlined): its plan uses the indexes whatever the tables' size.
 */
export const dispatchedByIdSql = (s: string) => lookupFunctionSql(s, 'id', 'bigint');

/** `outbox_dispatched_by_message_id(uuid[])`: as {@link dispatchedByIdSql}, by message id. */
export const dispatchedByMessageIdSql = (s: string) => lookupFunctionSql(s, 'message_id', 'uuid');

const lookupFunctionSql = (s: string, column: 'id' | 'message_id', type: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_dispatched_by_${column}(p_keys ${type}[])
RETURNS SETOF ${s}.outbox
LANGUAGE sql STABLE
SET enable_seqscan = off
AS $fn$
${[
  ...ringTables(s).map((t) => `SELECT d.* FROM ${t} d WHERE d.${column} = ANY (p_keys)`),
  ...batchTables(s).map(
    (t) => `SELECT m.*
FROM unnest(p_keys) AS q(k)
JOIN ${t} b ON b.${column === 'id' ? 'ids' : 'message_ids'} @> q.k
${batchRows}
WHERE m.${column} = q.k`,
  ),
].join('\nUNION ALL\n')}
$fn$`;

/** The batch tables, their indexes, the view and the functions (migration 021). */
export const batchedLogDdl = (s: string): string[] => [
  `CREATE TYPE ${s}.outbox_uuid_range AS RANGE (subtype = uuid)`,
  `CREATE TYPE ${s}.outbox_dispatched_message AS (
     ${DISPATCHED_COLUMNS.map((c) => `${c} ${DISPATCHED_TYPES[c]}`).join(',\n     ')}
   )`,
  ...batchTables(s).flatMap((t, k) => [
    // No default, no check, no trigger: what lands here was checked when it entered the outbox.
    `CREATE TABLE ${t} (
       ids int8range NOT NULL,
       message_ids ${s}.outbox_uuid_range NOT NULL,
       dispatched_at timestamptz NOT NULL,
       message_count int NOT NULL,
       messages ${s}.outbox_dispatched_message[] NOT NULL
     ) WITH (fillfactor = 100)`,
    `CREATE INDEX outbox_dispatched_batch_${k}_ids_idx ON ${t} USING gist (ids)`,
    `CREATE INDEX outbox_dispatched_batch_${k}_message_ids_idx ON ${t} USING gist (message_ids)`,
    `CREATE INDEX outbox_dispatched_batch_${k}_dispatched_at_idx ON ${t} (dispatched_at)`,
  ]),
  messagesViewSql(s),
  dispatchedByIdSql(s),
  dispatchedByMessageIdSql(s),
  pruneRingFunctionSql(s),
];

const ARCHIVE_COLUMNS = `id, message_id, aggregate_id, topic, payload, headers, sequence,
   created_at, available_at, dispatched_at, attempts, last_error, shadow,
   approval_state, approval_requested_by, approval_decided_by, approval_decided_at,
   approval_note, dedupe_key, approval_expires_at, approval_on_expiry`;

/**
 * Copies a whole slot of the ring, both its tables, into `outbox_archive` (before its TRUNCATE),
 * as a format() template: the slot is `%1$s`.
 */
const archiveSlotTemplate = (s: string) =>
  `'${`
INSERT INTO ${s}.outbox_archive (${ARCHIVE_COLUMNS})
SELECT ${ARCHIVE_COLUMNS} FROM ${s}.outbox_dispatched_%1$s
UNION ALL
SELECT ${ARCHIVE_COLUMNS.replace(/(\w+)/g, (c) => (c === 'dispatched_at' ? 'b.dispatched_at' : `m.${c}`))}
FROM ${s}.outbox_dispatched_batch_%1$s b ${batchRows}
ON CONFLICT (id) DO NOTHING`.replace(/'/g, "''")}'`;

/** How many messages a slot holds, and its oldest and newest `dispatched_at` (template, `%1$s`). */
const slotStatsTemplate = (s: string) =>
  `'SELECT coalesce(sum(n), 0)::int, min(t), max(t) FROM (
     SELECT 1 AS n, dispatched_at AS t FROM ${s}.outbox_dispatched_%1$s
     UNION ALL
     SELECT message_count, dispatched_at FROM ${s}.outbox_dispatched_batch_%1$s) x'`;

/**
 * Retention of the ring, as one function call (one transaction, any executor): `outbox_prune_ring(
 * older_than_ms, archive, dry_run)` returns how many dispatched messages it removed (or would
 * remove) and the oldest one's `dispatched_at`. A slot is its two tables (per-message and batches).
 *
 * 1. Every slot but the current one whose newest row is past the cut-off is emptied (archived
 *    first with `archive`). Its ACCESS EXCLUSIVE locks wait for a settle still writing it (one
 *    that read the ring before a rotation) and the newest row is read under them, so a row
 *    added meanwhile keeps the slot.
 * 2. Once the current slot's oldest row is older than half the cut-off, the settle moves on to an
 *    empty slot; the one it leaves is emptied at once if all of it is past the cut-off (a cut-off
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
      EXECUTE format('LOCK TABLE ${s}.outbox_dispatched_%1$s, ${s}.outbox_dispatched_batch_%1$s IN ACCESS EXCLUSIVE MODE', k);
    END IF;
    EXECUTE format(${slotStatsTemplate(s)}, k) INTO v_n, v_min, v_max;
    IF v_n = 0 THEN
      v_empty[k + 1] := true;
    ELSIF v_max < v_cut THEN
      IF NOT p_dry_run THEN
        IF p_archive THEN
          EXECUTE format(${archiveSlotTemplate(s)}, k);
        END IF;
        EXECUTE format('TRUNCATE ${s}.outbox_dispatched_%1$s, ${s}.outbox_dispatched_batch_%1$s', k);
      END IF;
      v_empty[k + 1] := true;
      v_total := v_total + v_n;
      v_oldest := least(v_oldest, v_min);
    END IF;
  END LOOP;
  EXECUTE format(${slotStatsTemplate(s)}, v_current) INTO v_n, v_min, v_max;
  IF v_n > 0 AND v_min < v_half THEN
    v_next := CASE WHEN v_empty[(v_current + 1) % ${RING_SLOTS} + 1] THEN (v_current + 1) % ${RING_SLOTS}
                   WHEN v_empty[(v_current + 2) % ${RING_SLOTS} + 1] THEN (v_current + 2) % ${RING_SLOTS} END;
    IF v_next IS NOT NULL THEN
      IF NOT p_dry_run THEN
        UPDATE ${s}.outbox_dispatched_ring SET slot = v_next, rotated_at = now();
      END IF;
      IF v_max < v_cut THEN
        IF NOT p_dry_run THEN
          EXECUTE format('LOCK TABLE ${s}.outbox_dispatched_%1$s, ${s}.outbox_dispatched_batch_%1$s IN ACCESS EXCLUSIVE MODE', v_current);
          EXECUTE format(${slotStatsTemplate(s)}, v_current) INTO v_n, v_min, v_max;
        END IF;
        IF v_n > 0 AND v_max < v_cut THEN
          IF NOT p_dry_run THEN
            IF p_archive THEN
              EXECUTE format(${archiveSlotTemplate(s)}, v_current);
            END IF;
            EXECUTE format('TRUNCATE ${s}.outbox_dispatched_%1$s, ${s}.outbox_dispatched_batch_%1$s', v_current);
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

/** Calls {@link pruneRingFunctionSql}. $1 cut-off in ms, $2 archive, $3 dry run. */
export const pruneRingSql = (s: string) =>
  `SELECT n, oldest FROM ${s}.outbox_prune_ring($1::float8, $2::boolean, $3::boolean)`;
