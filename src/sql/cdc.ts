/**
 * Statements of the CDC dispatcher (src/cdc/). The WAL only tells us WHICH rows were committed
 * and when; every decision about publishing goes through the same claim/lease/settle statements
 * as the polling dispatcher (claim.ts, settle.ts), so ordering, retries, dead letters and fencing
 * cannot drift apart between the two modes.
 */

/**
 * Where each candidate the claim did not (or no longer) return stands, to decide whether its WAL
 * position may be confirmed:
 * - `done`: published or dead-lettered (by us, by the sweeper or by another dispatcher); `gone`:
 *   deleted (retention, a manual cleanup) — nothing left to do.
 * - `deferred`: not due — delayed delivery, or backoff after a failure that settle RECORDED
 *   (`last_error`, `attempts`) — or stuck behind an earlier message of its aggregate that is not
 *   due or is dead-lettered. Its fate is in the table; the position may be confirmed.
 * - `leased`: another dispatcher holds it right now; `blocked`: behind an in-flight predecessor.
 *   Both resolve shortly: the position waits for them.
 * `now()` is this statement's transaction start, the same clock claim.ts compares with.
 *
 * $1 candidate row ids.
 */
export const candidateStatesSql = (schema: string) => `
SELECT c.id::text AS id,
       CASE
         WHEN o.id IS NULL THEN 'gone'
         WHEN o.dispatched_at IS NOT NULL OR o.dead_lettered_at IS NOT NULL THEN 'done'
         WHEN o.available_at > now() THEN 'deferred'
         WHEN o.lease_expires_at > now() THEN 'leased'
         WHEN EXISTS (
           SELECT 1 FROM ${schema}.outbox p
           WHERE p.aggregate_id = o.aggregate_id
             AND p.sequence < o.sequence
             AND p.dispatched_at IS NULL
             AND (p.available_at > now() OR p.dead_lettered_at IS NOT NULL)
         ) THEN 'deferred'
         ELSE 'blocked'
       END AS state,
       extract(epoch FROM o.available_at) * 1000 AS "availableAtMs"
FROM unnest($1::bigint[]) AS c(id)
LEFT JOIN ${schema}.outbox o ON o.id = c.id`;

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
