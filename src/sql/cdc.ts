/**
 * Statements of the CDC dispatcher (src/cdc/). The WAL only tells us WHEN rows were committed and
 * WHICH ones hold back the slot's confirmation; every decision about publishing goes through the
 * same claim/lease/settle statements as the polling dispatcher (claim.ts, settle.ts), so
 * ordering, retries, dead letters and fencing cannot drift apart between the two modes.
 *
 * The claim is the polling claim itself, unrestricted (issue 16): a commit wakes the dispatcher,
 * and the claim takes whatever is due, at the polling claim's bounded cost. The rows the WAL
 * announced (the candidates) serve only the confirmation: the slot is confirmed past a
 * transaction once all its rows are settled, and the candidates say which rows to wait for.
 * Tried and rejected:
 * - The claim restricted to the candidates (`o.id = ANY($4)`, the previous version): every claim
 *   carried every candidate id — 100,000 after a deep backlog was committed — and a head that
 *   was not a candidate (written before the slot, or handed to the sweeper) was never claimed
 *   by the WAL-driven worker, so the candidates behind it waited for the sweeper.
 * - The claim restricted to a bounded prefix of the candidates: 20,000 blocked candidates of one
 *   aggregate ahead of another aggregate's new message keep that message out of every claim
 *   until the deep aggregate drains — the head-of-line blocking the claim was rebuilt to end.
 */

/**
 * Where each candidate the claim did not (or no longer) return stands, to decide whether its WAL
 * position may be confirmed:
 * - `done`: published or dead-lettered (by us, by the sweeper or by another dispatcher); `gone`:
 *   deleted (retention, a manual cleanup) — nothing left to do.
 * - `deferred`: not due — delayed delivery, or backoff after a failure that settle RECORDED
 *   (`last_error`, `attempts`) — or an ordered message whose aggregate's head is not due or is
 *   dead-lettered. Its fate is in the table; the position may be confirmed.
 * - `leased`: another dispatcher holds it right now; `blocked`: an ordered message behind a head
 *   that is due (in flight, or about to be claimed), or a claimable row the last claim just
 *   missed. Both resolve shortly: the position waits for them.
 * `now()` is this statement's transaction start, the same clock claim.ts compares with.
 *
 * Cost (issues 16, 25): one primary-key probe per candidate, and per aggregate among them a walk
 * back from its earliest pending candidate along `prev_id` (migration 012) to the head: a
 * primary-key probe per pending message ahead of that candidate, at most
 * {@link HEAD_WALK_STEPS}. The dispatcher passes a bounded slice of its candidates (publish-cycle.ts
 * `#classify`): 500 candidates of one aggregate read about 501 rows, under a millisecond.
 * Only past that many pending messages ahead of the earliest candidate (a deep chain committed
 * before the slot, or handed to the sweeper) is the head looked up in `outbox_chain_idx` instead.
 * Tried and replaced: that lookup for every aggregate (the first entry of its chain), one probe
 * on a quiet database, but under a snapshot held open it walked the dead entries of every
 * message of the aggregate dispatched since (held-snapshot.test.ts: a hot aggregate's
 * classification read its 20,000 dispatched messages' pages). Before that, "is any earlier
 * pending message of the aggregate not due or dead?", a walk of every predecessor: 20,000
 * candidates on one aggregate behind a leased head cost every look ~200 million index entries
 * (the first one had not finished after 30 s in test/integration/latency/cdc-bound.test.ts).
 * Only the head can hold an aggregate back: a message that fails becomes its aggregate's head
 * (its run stops there), and a delayed message in the middle of a chain becomes the head before
 * anything behind it can go — until then the rows behind it read `blocked`, which only delays
 * their confirmation. The rows are read by `= ANY` of the constant array, not by a join with it:
 * joined with `unnest`, the planner hashed a sequential scan of the whole outbox (20,000 rows
 * read for 500 candidates).
 *
 * $1 candidate row ids.
 */
/**
 * How far {@link candidateStatesSql} walks back from a candidate to its aggregate's head before it
 * looks the head up in `outbox_chain_idx` instead.
 */
export const HEAD_WALK_STEPS = 64;

export const candidateStatesSql = (schema: string) => `
WITH o AS MATERIALIZED (
  -- One primary-key probe per candidate: a LATERAL subquery with LIMIT cannot be flattened into a
  -- join. With \`o.id = ANY($1)\` (or a plain LATERAL) PostgreSQL 15 hashed a sequential scan of a
  -- 20,000-row outbox for 500 ids: every row read (cdc-bound.test.ts on a stock PG 15 server).
  SELECT o.id, o.aggregate_id, o.ordered, o.dispatched_at, o.dead_lettered_at, o.available_at,
         o.lease_expires_at, o.sequence
  FROM unnest($1::bigint[]) AS c(id)
  CROSS JOIN LATERAL (
    SELECT * FROM ${schema}.outbox o WHERE o.id = c.id LIMIT 1
  ) o
),
starts AS MATERIALIZED (
  -- Each aggregate's earliest pending ordered candidate: every later one has the same head.
  SELECT DISTINCT ON (aggregate_id) aggregate_id, id
  FROM o
  WHERE ordered AND dispatched_at IS NULL AND dead_lettered_at IS NULL
  ORDER BY aggregate_id, sequence
),
heads AS MATERIALIZED (
  SELECT s.aggregate_id,
         CASE WHEN w.capped THEN f.available_at ELSE w.available_at END AS available_at,
         CASE WHEN w.capped THEN f.dead_lettered_at ELSE w.dead_lettered_at END AS dead_lettered_at
  FROM starts s
  CROSS JOIN LATERAL (
    -- Back along prev_id while the predecessor is pending (dispatched_at NULL, said so that no
    -- partial index matches, as in lane.ts), through messages that left the chain (ordered
    -- false: dead-lettered under skip, rejected) as outbox_pending_predecessor does. Each step
    -- a LATERAL ... LIMIT 1, which cannot be flattened into a join (see \`o\`). The furthest
    -- ordered one reached is the head.
    WITH RECURSIVE back AS (
      SELECT p.prev_id, p.ordered, p.available_at, p.dead_lettered_at, 0 AS steps
      FROM ${schema}.outbox p
      WHERE p.id = s.id
      UNION ALL
      SELECT p.prev_id, p.ordered, p.available_at, p.dead_lettered_at, b.steps + 1
      FROM back b
      CROSS JOIN LATERAL (
        SELECT p.prev_id, p.ordered, p.available_at, p.dead_lettered_at
        FROM ${schema}.outbox p
        WHERE p.id = b.prev_id AND num_nulls(p.dispatched_at) = 1
        LIMIT 1
      ) p
      WHERE b.steps < ${HEAD_WALK_STEPS}
    )
    SELECT (SELECT max(steps) FROM back) >= ${HEAD_WALK_STEPS} AS capped,
           b.available_at, b.dead_lettered_at
    FROM back b
    WHERE b.ordered
    ORDER BY b.steps DESC
    LIMIT 1
  ) w
  LEFT JOIN LATERAL (
    -- Only where the walk stopped short of the head: the first entry of the chain.
    SELECT p.available_at, p.dead_lettered_at
    FROM ${schema}.outbox p
    WHERE w.capped
      AND p.aggregate_id = s.aggregate_id
      AND p.dispatched_at IS NULL
      AND p.ordered
    ORDER BY p.sequence
    LIMIT 1
  ) f ON true
)
SELECT c.id::text AS id,
       CASE
         -- Not in the outbox: settled already (moved to the dispatched log, migrations 018 and
         -- 021: its lookup by id, dispatched-log.ts), or not visible yet (classify.ts looks again).
         WHEN o.id IS NULL AND EXISTS (
           SELECT 1 FROM ${schema}.outbox_dispatched_by_id(ARRAY[c.id])) THEN 'done'
         WHEN o.id IS NULL THEN 'gone'
         WHEN o.dispatched_at IS NOT NULL OR o.dead_lettered_at IS NOT NULL THEN 'done'
         WHEN o.available_at > now() THEN 'deferred'
         WHEN o.lease_expires_at > now() THEN 'leased'
         WHEN h.available_at > now() OR h.dead_lettered_at IS NOT NULL THEN 'deferred'
         ELSE 'blocked'
       END AS state,
       -- What a deferred row waits for, in ms from this statement's now(): its own due time or
       -- its head's, whichever comes first (waking at the head's is what lets it move). Relative,
       -- so the dispatcher's clock need not agree with the server's. NULL: nothing in time
       -- (a dead-lettered head; a held row, whose 'infinity' gives Infinity).
       (extract(epoch FROM least(
          CASE WHEN o.available_at > now() THEN o.available_at END,
          CASE WHEN h.dead_lettered_at IS NULL AND h.available_at > now() THEN h.available_at END))
        - extract(epoch FROM now())) * 1000 AS "dueInMs"
FROM unnest($1::bigint[]) AS c(id)
LEFT JOIN o ON o.id = c.id
LEFT JOIN heads h ON o.ordered AND h.aggregate_id = o.aggregate_id`;

/**
 * When the next ready message falls due, in ms from now (no row: none is waiting for its time):
 * at a wake-up at a due time, the CDC dispatcher looks for the next one (a delayed delivery,
 * another dispatcher's backoff) and claims again then instead of waiting for a WAL commit or the
 * sweeper — and if the wake-up came a moment before the server's clock reached the due time, it
 * finds the same row again and wakes once more. It runs just BEFORE the wake-up's claim
 * (publish-cycle.ts `#lookAhead`), so every row is either due at the claim, which takes it, or
 * still ahead of this look; run after the claim, it missed a row that fell due between the two
 * statements. Only rows still AHEAD of `now()`: a row already due is the claim's right after, and
 * one the claim does not take is leased, or not claimable, and waking for it at once would spin. The due times a retry or a deferred candidate
 * set are not read here: the settle and the candidate-state statement report them (publish-cycle.ts
 * `#runCycle`), because a look after the fact misses a due time that passed meanwhile.
 * The first entry past `now()` of
 * `outbox_ready_idx`, the claim's own index: one probe, however many heads are backing off
 * (written as `ORDER BY ... LIMIT 1`: as `min()` it was planned as an aggregate over every entry
 * past `now()`). Heads only — what waits behind a head becomes ready when the head is settled,
 * which the claim after that settle sees. A held message (`available_at = infinity`, migration
 * 010) never falls due by time, and `infinity - now()` is an error before Postgres 17.
 */
export const nextDueSql = (schema: string) => `
SELECT extract(epoch FROM o.available_at - now()) * 1000 AS "dueInMs"
FROM ${schema}.outbox o
WHERE o.ready
  AND o.dispatched_at IS NULL
  AND o.dead_lettered_at IS NULL
  AND o.available_at > now()
  AND o.available_at < 'infinity'
ORDER BY o.available_at
LIMIT 1`;

/** Does the publication exist? A catalog read, so a non-owner can check without privileges. */
export const publicationExistsSql = `SELECT 1 FROM pg_publication WHERE pubname = $1`;

/**
 * Publishes INSERTs of the outbox only: updates (leases, settles) and deletes (retention) would
 * multiply WAL traffic to decode and ship for nothing. Identifiers cannot be parameters; both come
 * validated through quoteIdentifier.
 */
export const createPublicationSql = (publication: string, schema: string) =>
  `CREATE PUBLICATION ${publication} FOR TABLE ${schema}.outbox WITH (publish = 'insert')`;

/**
 * The slot, if it exists, with where a restart resumes. A slot is cluster-wide, so its database
 * is checked too: a same-named slot of another database must not be taken over.
 */
export const slotSql = `
SELECT database, plugin, active, confirmed_flush_lsn::text AS "confirmedLsn"
FROM pg_replication_slots WHERE slot_name = $1`;

/**
 * Creates the slot once; every later start reuses it (re-creating would skip whatever was
 * committed while the dispatcher was down — the sweeper would still publish it, but late).
 * `pgoutput` ships with Postgres: no server extension to install.
 */
export const createSlotSql = `
SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'pgoutput')`;

/**
 * Slot lag in bytes: WAL the server keeps only because this slot has not confirmed it. This is
 * the number that fills the disk when a CDC dispatcher is down (see docs/latency.md).
 */
export const slotLagSql = `
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::float8 AS "lagBytes"
FROM pg_replication_slots WHERE slot_name = $1`;

/** Name of this connection's database, for the default slot name (slots are cluster-wide). */
export const currentDatabaseSql = `SELECT current_database() AS name`;

/** `server_version_num` of the server, e.g. 150020 (a column list needs 150000). */
export const serverVersionNumSql = `SELECT current_setting('server_version_num')::int AS version`;

/**
 * The lanes engine's publication (src/cdc/lane-cdc-wake-source.ts): INSERTs of
 * `outbox_lane_messages` only, as {@link createPublicationSql} for the claim engine's table. A
 * lanes reader never updates a message row, so nothing else would be sent anyway.
 *
 * From PostgreSQL 15, only the three columns a wake-up reads (`columns`): the stream names
 * messages, it does not carry them (the dispatcher reads them by id), so the payload and headers
 * were decoded by the server, sent and parsed by the client for nothing — a 100 kB payload
 * streamed to be thrown away. Before 15 (no column lists) the whole row.
 */
export const createLanePublicationSql =
  (columns: boolean) => (publication: string, schema: string) =>
    `CREATE PUBLICATION ${publication} FOR TABLE ${schema}.outbox_lane_messages` +
    `${columns ? ' (id, lane, available_at)' : ''} WITH (publish = 'insert')`;

/**
 * Moves an inactive slot to the current end of WAL without streaming what lies before. The lanes
 * CDC wake-up source does this at every (re)start: its stream only names new messages to publish
 * sooner; whatever was committed while nobody streamed is found by the lane read that follows
 * the start (the lanes' cursors are the guarantee), so decoding and sending that WAL would be
 * work for nothing. Fails (55006, object in use) while another connection streams the slot.
 */
export const advanceSlotSql = `
SELECT end_lsn::text AS lsn FROM pg_replication_slot_advance($1, pg_current_wal_lsn())`;
