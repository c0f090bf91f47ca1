/**
 * The statements of fleet mode (`outbox dispatch --databases GLOB`, issue 40): one process
 * serving many tenant databases (or schemas) of a server with a bounded number of connections.
 *
 * Everything here runs on ONE connection per server (the "control" connection, to the database
 * named in `--database-url`), whatever the number of tenants: discovery, the activity probe and
 * the ownership leases. A tenant's own database is only connected to while it has work.
 */

/**
 * Databases of the server whose name matches the glob (as a LIKE pattern, `\` escaping).
 * Templates and databases that refuse connections are left out: connecting to a template would
 * make `CREATE DATABASE … TEMPLATE` fail with "source database is being accessed by other users".
 */
export const discoverDatabasesSql = `
SELECT datname AS name
FROM pg_database
WHERE datallowconn AND NOT datistemplate AND datname LIKE $1 ESCAPE '\\'
ORDER BY datname`;

/**
 * Schemas of the control database that match the glob and hold an outbox table: a schema
 * created for a tenant but not migrated yet is found once `outbox migrate` made its tables.
 */
export const discoverSchemasSql = `
SELECT n.nspname AS name
FROM pg_namespace n
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = 'outbox' AND c.relkind IN ('r', 'p')
WHERE n.nspname LIKE $1 ESCAPE '\\'
ORDER BY n.nspname`;

/**
 * Every schema of the database that matches, migrated or not (what `outbox migrate --schemas`
 * brings to the current version). The system schemas never match a tenant glob on purpose.
 */
export const discoverAnySchemasSql = `
SELECT nspname AS name
FROM pg_namespace
WHERE nspname LIKE $1 ESCAPE '\\'
  AND nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
ORDER BY nspname`;

/**
 * Which databases had writes, for all of them in one read: the cumulative statistics of
 * `pg_stat_database` (shared memory, no table scanned, no privilege needed). The dispatcher
 * compares each database's `changes` with the value it saw last; a database whose counter did not
 * move had no INSERT or UPDATE committed or aborted, so no new message (an outbox row is an
 * INSERT; a replay or an approval an UPDATE) and it is not polled.
 *
 * Why these counters and not `xact_commit`: our own empty claims are transactions too, so
 * `xact_commit` moves after every poll and the database would look busy forever; an empty claim
 * writes nothing. Our own settles do move `tup_inserted`/`tup_updated`, which costs one extra
 * (empty) poll after a busy period, not a loop.
 *
 * The counters lag: a backend reports its counts when it goes idle, at most once a second, and
 * a backend that reported less than a second ago waits up to 10 s (PostgreSQL's
 * PGSTAT_IDLE_INTERVAL). A database that had work therefore stays polled for a while after it
 * (fleet-target.ts, `warmMs`), and every database is polled at least every `safetyPollMs`.
 * Tried: `pg_stat_activity.xact_start` per database (sees only transactions open at that
 * instant, misses short ones); LISTEN (a connection per database, which is the cost we avoid);
 * a trigger writing to a shared table (needs dblink across databases, and a write per message).
 */
export const databaseActivitySql = `
SELECT datname AS name, (tup_inserted + tup_updated)::text AS changes
FROM pg_stat_database
WHERE datname LIKE $1 ESCAPE '\\'`;

/**
 * The same for schemas of one database: the outbox table's own statistics, per schema, which
 * are exact to the table (no business row moves them).
 */
export const schemaActivitySql = `
SELECT schemaname AS name, (n_tup_ins + n_tup_upd)::text AS changes
FROM pg_stat_all_tables
WHERE relname = 'outbox' AND schemaname LIKE $1 ESCAPE '\\'`;

/**
 * One tenant's counter, read right after its dispatcher's own writes were flushed to the
 * statistics (`pg_stat_force_next_flush()` on its connection): the new baseline, so that the
 * dispatcher's own leases and settles do not wake the tenant once more (each idle tenant's message
 * cost two connections before: the real turn and one woken by the turn's own writes).
 */
export const databaseCounterSql = `
SELECT (tup_inserted + tup_updated)::text AS changes FROM pg_stat_database WHERE datname = $1`;
export const schemaCounterSql = `
SELECT (n_tup_ins + n_tup_upd)::text AS changes
FROM pg_stat_all_tables WHERE relname = 'outbox' AND schemaname = $1`;

/**
 * Flushes this backend's pending statistics now (PostgreSQL 15+; any role): the call returns
 * after the flush, since a backend reports its statistics before it says it is ready for the next
 * query, and this makes that report unconditional.
 */
export const forceStatsFlushSql = `SELECT pg_stat_force_next_flush()`;

/**
 * When the next message of a tenant becomes claimable, in ms from now (NULL: nothing pending).
 * After a database goes idle the dispatcher sleeps on this instead of polling: a message backing
 * off after a failure, or leased by a dispatcher that died, is due at a time no write announces.
 * Reads the first entries of `outbox_ready_idx` only (heads and unordered messages, due order):
 * the rows ahead that are leased are few (at most what is in flight), so a LIMIT well above a
 * batch sees past them; what waits behind a head becomes due when the head is settled, by a
 * write the activity probe sees.
 *
 * The scan starts at the lane's floor (sql/lane.ts), as the claim does: below it nothing is
 * pending, only the dead entries of what was settled, which a held snapshot keeps from vacuum.
 * Without it this read walked every message dispatched since the snapshot was taken (3,000
 * buffers after 10,000, 12,000 after 40,000; test/integration/fleet/next-due-held-snapshot).
 */
export const nextDueSql = (schema: string) => `
SELECT (extract(epoch FROM min(greatest(available_at, coalesce(lease_expires_at, available_at)))
        - now()) * 1000)::float8 AS "inMs"
FROM (
  SELECT available_at, lease_expires_at
  FROM ${schema}.outbox
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND ready
    -- A sub-select, run once: pg_sequence_last_value is volatile, and a volatile expression
    -- is a filter on every row, never the index scan's start.
    AND available_at >= (SELECT timestamptz 'epoch' + coalesce(
      pg_sequence_last_value('${schema}.outbox_lane_floor'::regclass), 0) * interval '1 microsecond')
  ORDER BY available_at, id
  LIMIT 1000
) head`;

/**
 * The ownership tables, in the control database (created at start, idempotent). One row per live
 * process (`members`) and per served tenant (`owners`). The lease is the MEMBER's: a process owns
 * the tenants of its `owners` rows while its `members` row is unexpired, and one heartbeat every
 * lease/3 renews that one row, whatever the number of tenants. (Renewing a row per tenant wrote
 * a row version per tenant per round, which a held snapshot on the control database keeps from
 * vacuum: 500 tenants at a 30 s lease left 180,000 versions an hour for every round to read.)
 * `owners` changes only when a tenant changes hands. Its `expires_at` is when the member took the
 * tenant plus the lease, kept for operators; it decides nothing. The clock is the database's, so
 * hosts' clocks do not matter. The transaction-scoped advisory lock only keeps two first starts
 * from racing on CREATE (which is not safe concurrently even with IF NOT EXISTS).
 */
export const createFleetTablesSql = [
  `SELECT pg_advisory_xact_lock(hashtext('agent_outbox_fleet'))`,
  `CREATE SCHEMA IF NOT EXISTS agent_outbox_fleet`,
  // Per scope (what a process serves: its glob and schema): fleets serving different globs from
  // one control database must not count each other's members in their fair share.
  `CREATE TABLE IF NOT EXISTS agent_outbox_fleet.members (
  scope text NOT NULL,
  member text NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (scope, member)
)`,
  `CREATE TABLE IF NOT EXISTS agent_outbox_fleet.owners (
  scope text NOT NULL,
  target text NOT NULL,
  member text NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (scope, target)
)`,
];

/**
 * One heartbeat, one statement: renews this member (its one row: the lease of every tenant it
 * owns), lists the live members (for the fair share) and how many tenants each owns. $1 member,
 * $2 lease in ms, $3 scope (the glob: fleets serving different globs on one server do not count
 * each other).
 */
export const heartbeatSql = `
WITH me AS (
  INSERT INTO agent_outbox_fleet.members (scope, member, expires_at)
  VALUES ($3, $1, now() + $2 * interval '1 millisecond')
  ON CONFLICT (scope, member) DO UPDATE SET expires_at = EXCLUDED.expires_at
  RETURNING member
)
SELECT m.member,
       (SELECT count(*) FROM agent_outbox_fleet.owners o
        WHERE o.scope = $3 AND o.member = m.member)::int AS owned
FROM agent_outbox_fleet.members m
WHERE m.scope = $3 AND m.expires_at > now() AND m.member <> $1
UNION ALL
SELECT member, 0 FROM me`;

/**
 * Which of the targets this member keeps are still its own (read right after its heartbeat
 * renewed its lease): a target another member took while this one's lease had run out is gone.
 * Reads only; writes nothing per tenant. $1 scope, $2 member, $3 targets.
 */
export const stillOwnedSql = `
SELECT target FROM agent_outbox_fleet.owners
WHERE scope = $1 AND member = $2 AND target = ANY($3::text[])`;

/**
 * Takes the targets that are free (no row, or an owner whose member lease expired: it died, or
 * stalled past its lease); returns the ones taken. A target a live member holds is left to it.
 */
export const acquireOwnershipSql = `
INSERT INTO agent_outbox_fleet.owners AS cur (scope, target, member, expires_at)
SELECT $1, t, $2, now() + $3 * interval '1 millisecond' FROM unnest($4::text[]) t
ON CONFLICT (scope, target) DO UPDATE
  SET member = EXCLUDED.member, expires_at = EXCLUDED.expires_at
  WHERE cur.member = EXCLUDED.member
     OR NOT EXISTS (
       SELECT 1 FROM agent_outbox_fleet.members m
       WHERE m.scope = cur.scope AND m.member = cur.member AND m.expires_at > now())
RETURNING target`;

/**
 * Which of these targets a live member other than this one holds, and for how long yet (its
 * member lease): a target whose owner died is free when that lease runs out, and the next
 * heartbeat is timed for that moment.
 */
export const ownedByOthersSql = `
SELECT o.target, o.member, (extract(epoch FROM m.expires_at - now()) * 1000)::float8 AS "expiresInMs"
FROM agent_outbox_fleet.owners o
JOIN agent_outbox_fleet.members m ON m.scope = o.scope AND m.member = o.member
WHERE o.scope = $1 AND o.member <> $2 AND m.expires_at > now() AND o.target = ANY($3::text[])`;

/** Gives targets back (rebalance, a dropped database, a graceful stop). */
export const releaseOwnershipSql = `
DELETE FROM agent_outbox_fleet.owners WHERE scope = $1 AND member = $2 AND target = ANY($3::text[])`;

/** A stopping member leaves, so the others count it out at once instead of after its lease. */
export const leaveFleetSql = `
WITH gone AS (DELETE FROM agent_outbox_fleet.owners WHERE member = $1)
DELETE FROM agent_outbox_fleet.members WHERE member = $1`;

/** Members long dead (a day past their lease) are removed so the table stays small. */
export const forgetDeadMembersSql = `
DELETE FROM agent_outbox_fleet.members WHERE expires_at < now() - interval '1 day'`;

/**
 * {@link schemaActivitySql} for the lanes engine: a lanes message is an INSERT into
 * `outbox_lane_messages` (append-only: nothing else writes it), a replayed dead letter an UPDATE
 * of `outbox_lane_parked`. The dispatcher's own writes go to `outbox_lanes` and
 * `outbox_lane_owners` (every turn: its lanes taken and given back) and to the parked table
 * (failures only), so only a turn that parked or settled a failure moves this counter itself.
 */
export const laneSchemaActivitySql = `
SELECT schemaname AS name,
       sum(CASE WHEN relname = 'outbox_lane_messages' THEN n_tup_ins ELSE n_tup_upd END)::text
         AS changes
FROM pg_stat_all_tables
WHERE relname IN ('outbox_lane_messages', 'outbox_lane_parked') AND schemaname LIKE $1 ESCAPE '\\'
GROUP BY schemaname`;
export const laneSchemaCounterSql = `
SELECT sum(CASE WHEN relname = 'outbox_lane_messages' THEN n_tup_ins ELSE n_tup_upd END)::text
         AS changes
FROM pg_stat_all_tables
WHERE relname IN ('outbox_lane_messages', 'outbox_lane_parked') AND schemaname = $1`;

/**
 * The activity of schemas for a fleet that follows each schema's record (either engine): the
 * claim engine's counter and the lanes engine's added up. A counter moved by the engine a schema
 * does not use stays still, so the sum moves exactly when the one in use does. One read of
 * `pg_stat_all_tables` as before (three table names instead of one or two).
 */
export const recordedSchemaActivitySql = `
SELECT schemaname AS name,
       sum(CASE WHEN relname = 'outbox_lane_messages' THEN n_tup_ins
                WHEN relname = 'outbox_lane_parked' THEN n_tup_upd
                ELSE n_tup_ins + n_tup_upd END)::text AS changes
FROM pg_stat_all_tables
WHERE relname IN ('outbox', 'outbox_lane_messages', 'outbox_lane_parked')
  AND schemaname LIKE $1 ESCAPE '\\'
GROUP BY schemaname`;
export const recordedSchemaCounterSql = `
SELECT sum(CASE WHEN relname = 'outbox_lane_messages' THEN n_tup_ins
                WHEN relname = 'outbox_lane_parked' THEN n_tup_upd
                ELSE n_tup_ins + n_tup_upd END)::text AS changes
FROM pg_stat_all_tables
WHERE relname IN ('outbox', 'outbox_lane_messages', 'outbox_lane_parked') AND schemaname = $1`;

/**
 * {@link nextDueSql} for the lanes engine, read when a tenant's turn is over (its lanes given
 * back): in ms from now, NULL when nothing will come due without a write. What becomes due with no
 * write to announce it:
 *
 * - a parked head's retry (or a deferral's end): the first entry of `outbox_lane_parked_due_idx`
 *   per lane, one LIMIT 1 probe each (16), never the table; on a lane another dispatcher leases,
 *   not before its lease runs out;
 * - messages after the cursor of a lane another dispatcher leases (one that died: a fleet process
 *   killed mid-turn): when its lease runs out. One primary-key probe per leased lane, from the
 *   cursor, so what was consumed is never read;
 * - messages after the cursor of a free lane, up to the horizon (`outbox_lane_horizon`, taken
 *   afresh): due now. A turn ends when its drain found nothing, so these are what was committed
 *   after its last read and before the control connection read the tenant's counter as its new
 *   baseline: that counter will not move for them. Above the horizon are rows a turn may have
 *   published already (a cursor waits below an id that may still commit); the transaction that
 *   holds the horizon moves the counter when it ends, so they are left to it, and a long write
 *   transaction does not make the tenant reconnect in a loop.
 */
export const laneNextDueSql = (schema: string) => `
SELECT (extract(epoch FROM min(due) - now()) * 1000)::float8 AS "inMs"
FROM (
  SELECT CASE WHEN l.lease_expires_at > now()
              THEN greatest(p.available_at, l.lease_expires_at) ELSE p.available_at END AS due
  FROM ${schema}.outbox_lanes l
  CROSS JOIN LATERAL (
    SELECT q.available_at FROM ${schema}.outbox_lane_parked q
    WHERE q.lane = l.lane AND q.head AND q.dead_at IS NULL
    ORDER BY q.available_at LIMIT 1
  ) p
  UNION ALL
  SELECT CASE WHEN l.lease_expires_at > now() THEN l.lease_expires_at ELSE now() END
  FROM ${schema}.outbox_lanes l
  CROSS JOIN ${schema}.outbox_lane_horizon(0, 0, 0) h
  -- A LATERAL ... LIMIT 1, not EXISTS: the planner made the EXISTS a hash semi-join over a
  -- sequential scan of every message (790 buffers after 40,000 consumed, 213 after 10,000).
  -- ORDER BY m.id: the primary key's order, so the probe is a walk of it from the cursor. Without,
  -- once the table had statistics, the planner took a sequential scan that a LIMIT 1 would stop
  -- early, and found nothing to stop at: every message read, for each of the 16 lanes (13,632
  -- buffers after 40,000 consumed under a held snapshot, lanes-next-due.test.ts).
  CROSS JOIN LATERAL (
    SELECT 1 FROM ${schema}.outbox_lane_messages m
    WHERE m.lane = l.lane AND m.id > l.cursor
      AND (l.lease_expires_at > now() OR m.id <= h.safe)
    ORDER BY m.id
    LIMIT 1
  ) waiting
) next`;
