import { NOW_MS } from './clock.js';

/**
 * What an operator runs on a MySQL/MariaDB outbox (src/stores/mysql/mysql-admin.ts): status,
 * dead letters and their replay, retention. Pending-row reads go through `outbox_claim_idx`
 * or `outbox_dead_letter_idx` (both lead with `dispatched_at`), so their cost follows the
 * backlog, not the history kept.
 */

/**
 * The backlog in one pass over the pending rows, the Postgres `statusSql`'s columns. Dead
 * letters are not backlog. `SUM(condition)` counts: MySQL has no `FILTER`.
 */
export const statusSql = `
SELECT coalesce(SUM(dead_lettered_at IS NULL), 0) AS backlog,
       coalesce(MAX(CASE WHEN dead_lettered_at IS NULL THEN ${NOW_MS} - created_at END), 0) / 1000
         AS oldestPendingAgeSeconds,
       coalesce(SUM(dead_lettered_at IS NULL AND available_at <= ${NOW_MS}
                    AND (lease_expires_at IS NULL OR lease_expires_at <= ${NOW_MS})), 0) AS dueNow,
       coalesce(SUM(dead_lettered_at IS NULL AND lease_expires_at > ${NOW_MS}), 0) AS inFlight,
       coalesce(SUM(dead_lettered_at IS NULL AND available_at > ${NOW_MS}
                    AND (lease_expires_at IS NULL OR lease_expires_at <= ${NOW_MS})), 0) AS scheduled,
       coalesce(SUM(dead_lettered_at IS NOT NULL), 0) AS deadLetters
  FROM outbox FORCE INDEX (outbox_claim_idx)
 WHERE dispatched_at IS NULL`;

/** Undispatched messages by attempts so far. */
export const attemptsDistributionSql = `
SELECT attempts, COUNT(*) AS messages
  FROM outbox FORCE INDEX (outbox_claim_idx)
 WHERE dispatched_at IS NULL
 GROUP BY attempts
 ORDER BY attempts`;

/** The ? most recent errors of undispatched messages (latest attempt first, then newest row). */
export const lastErrorsSql = `
SELECT CAST(id AS CHAR) AS id, message_id AS messageId, topic, aggregate_id AS aggregateId,
       attempts, last_error AS lastError, dead_lettered_at IS NOT NULL AS dead
  FROM outbox FORCE INDEX (outbox_claim_idx)
 WHERE dispatched_at IS NULL AND last_error IS NOT NULL
 ORDER BY coalesce(dead_lettered_at, available_at) DESC, id DESC
 LIMIT ?`;

/**
 * Dead letters, oldest first, from `outbox_dead_letter_idx`. ? topic LIKE pattern (from a glob)
 * or NULL, twice; ? limit. The topic column's binary collation makes LIKE case-sensitive, as on
 * Postgres.
 */
export const listDeadSql = `
SELECT CAST(id AS CHAR) AS id, message_id AS messageId, topic, aggregate_id AS aggregateId,
       sequence, attempts, last_error AS lastError, created_at AS createdAt,
       dead_lettered_at AS deadLetteredAt
  FROM outbox
 WHERE dead_lettered_at IS NOT NULL AND dispatched_at IS NULL
   AND (? IS NULL OR topic LIKE ?)
 ORDER BY dead_lettered_at, id
 LIMIT ?`;

/**
 * Replay, step 1 of 2 in one transaction: lock the dead letters selected. ? list of row ids
 * (or a list with only 0), ? list of message ids (or ['']), ? 1 = every dead letter, ? topic LIKE
 * pattern or NULL, twice.
 */
export const selectDeadForReplaySql = `
SELECT CAST(id AS CHAR) AS id, message_id AS messageId, topic
  FROM outbox
 WHERE dead_lettered_at IS NOT NULL AND dispatched_at IS NULL
   AND (id IN (?) OR message_id IN (?) OR ? = 1)
   AND (? IS NULL OR topic LIKE ?)
 ORDER BY id
 FOR UPDATE`;

/**
 * Replay, step 2: the dead letter becomes a fresh pending message (attempts 0, due now) with the
 * same message id, so consumers that saw an earlier publish still dedupe it; `last_error` stays
 * as history until the next attempt. Under `hold` it is still its aggregate's head
 * (`outbox_heads` never moved past it) and goes next; under `skip` it left the chain
 * (`ordered = 0`) and goes out unordered. `parked = 0`: back in the claim's index range, whatever
 * it was (claim.ts), due now: a key no earlier than this statement's start, so never below the
 * claims' floor (floor.ts). ? list of row ids.
 */
export const replaySql = `
UPDATE outbox
   SET dead_lettered_at = NULL, attempts = 0, available_at = ${NOW_MS},
       lease_owner = NULL, lease_expires_at = NULL, parked = 0
 WHERE id IN (?)`;

/**
 * Retention, step 1: the first row created at or after the cut-off ? (ms), walking the primary
 * key from the start. Nothing from there on can have been dispatched before the cut-off (ids
 * follow creation), so {@link pruneDispatchedSql} stops there: a run reads the old rows it
 * deletes or steps over (dead letters, messages dispatched late), never the young history.
 * Tried: an index on `dispatched_at`, one more index write for every message dispatched, for a
 * job that runs every few minutes.
 */
export const pruneBoundarySql = `
SELECT id FROM outbox WHERE created_at >= ? ORDER BY id LIMIT 1`;

/**
 * Retention, step 2: deletes up to ? messages with ids below ? dispatched before ? (ms), oldest
 * ids first, as a statement of its own (autocommit) per batch, so a writer never waits for more
 * than one batch. Never touches pending rows or dead letters. `outbox_aggregates` and
 * `outbox_heads` stay, so an aggregate whose rows were all pruned continues where it was.
 */
export const pruneDispatchedSql = `
DELETE FROM outbox
 WHERE id < ? AND dispatched_at IS NOT NULL AND dispatched_at < ?
 ORDER BY id
 LIMIT ?`;

/** The server's clock, for a cut-off computed in the same clock as `dispatched_at`. */
export const nowSql = `SELECT ${NOW_MS} AS now`;
