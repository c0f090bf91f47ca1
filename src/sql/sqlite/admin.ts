/**
 * What an operator runs on a SQLite outbox (the SQLite store, src/stores/sqlite): status, dead
 * letters and their replay, retention. Times are INTEGER ms (schema.ts); every pending-row read
 * goes through a partial index on `dispatched_at IS NULL`, so its cost follows the backlog, not
 * the history kept.
 */

/**
 * Every pending row, each exactly once, from the two partial indexes that hold them (migration
 * 5): `outbox_chain_idx` the ordered ones, `outbox_unordered_pending_idx` the unordered ones.
 * Named (INDEXED BY), so a read of the backlog never becomes a scan of the history. `columns`
 * are the columns the query needs.
 */
const pendingRows = (columns: string) => `
SELECT ${columns} FROM outbox INDEXED BY outbox_chain_idx
 WHERE dispatched_at IS NULL AND ordered = 1
UNION ALL
SELECT ${columns} FROM outbox INDEXED BY outbox_unordered_pending_idx
 WHERE dispatched_at IS NULL AND ordered = 0`;

/**
 * The backlog in one pass over the pending rows: counts and the oldest age, like Postgres's
 * `statusSql`. Dead letters are not backlog. Aggregates with a dead head under `hold` stay
 * counted as backlog behind it, as in Postgres.
 * ?1 now (ms).
 */
export const statusSql = `
SELECT count(*) FILTER (WHERE dead_lettered_at IS NULL) AS backlog,
       coalesce(max(?1 - created_at) FILTER (WHERE dead_lettered_at IS NULL), 0) / 1000.0
         AS oldestPendingAgeSeconds,
       count(*) FILTER (WHERE dead_lettered_at IS NULL AND available_at <= ?1
                          AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)) AS dueNow,
       count(*) FILTER (WHERE dead_lettered_at IS NULL AND lease_expires_at > ?1) AS inFlight,
       count(*) FILTER (WHERE dead_lettered_at IS NULL AND available_at > ?1
                          AND (lease_expires_at IS NULL OR lease_expires_at <= ?1)) AS scheduled,
       count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) AS deadLetters
  FROM (${pendingRows('created_at, available_at, lease_expires_at, dead_lettered_at')})`;

/** Undispatched messages by attempts so far. */
export const attemptsDistributionSql = `
SELECT attempts, count(*) AS messages
  FROM (${pendingRows('attempts')})
 GROUP BY attempts
 ORDER BY attempts`;

/** The ?1 most recent errors of undispatched messages (latest attempt first, then newest row). */
export const lastErrorsSql = `
SELECT CAST(id AS TEXT) AS id, messageId, topic, aggregateId, attempts, lastError, dead
  FROM (${pendingRows(`id, message_id AS messageId, topic, aggregate_id AS aggregateId, attempts,
       last_error AS lastError, dead_lettered_at IS NOT NULL AS dead,
       coalesce(dead_lettered_at, available_at) AS lastAt`)})
 WHERE lastError IS NOT NULL
 ORDER BY lastAt DESC, id DESC
 LIMIT ?1`;

/**
 * Dead letters, oldest first, from `outbox_dead_letter_idx`. ?1 topic GLOB pattern or NULL, ?2
 * limit. GLOB, not LIKE: SQLite's LIKE ignores ASCII case, and a topic pattern must match the
 * same topics as on Postgres (see enqueue.ts).
 */
export const listDeadSql = `
SELECT CAST(id AS TEXT) AS id, message_id AS messageId, topic, aggregate_id AS aggregateId,
       sequence, attempts, last_error AS lastError, created_at AS createdAt,
       dead_lettered_at AS deadLetteredAt
  FROM outbox
 WHERE dead_lettered_at IS NOT NULL AND dispatched_at IS NULL
   AND (?1 IS NULL OR topic GLOB ?1)
 ORDER BY dead_lettered_at, id
 LIMIT ?2`;

/**
 * Replay: the dead letter becomes a fresh pending message (attempts 0, due now) with the same
 * message id, so consumers that saw an earlier publish still dedupe it; `last_error` stays as
 * history until the next attempt. `ready = 1`: under `hold` a dead letter is still its
 * aggregate's head and goes next; under `skip` it left the chain (`ordered = 0`) and goes out
 * unordered — either way the claim must be able to start from it (settle.ts marks every dead
 * letter ready already; this is belt and braces).
 * ?1 JSON array of row ids, ?2 JSON array of message ids, ?3 1 = every dead letter, ?4 topic
 * GLOB pattern or NULL, ?5 now (ms).
 */
export const replaySql = `
UPDATE outbox
   SET dead_lettered_at = NULL, attempts = 0, available_at = ?5, ready = 1,
       lease_owner = NULL, lease_expires_at = NULL
 WHERE dead_lettered_at IS NOT NULL
   AND dispatched_at IS NULL
   AND (id IN (SELECT value FROM json_each(?1))
        OR message_id IN (SELECT value FROM json_each(?2))
        OR ?3 = 1)
   AND (?4 IS NULL OR topic GLOB ?4)
RETURNING CAST(id AS TEXT) AS id, message_id AS messageId, topic`;

/**
 * Retention: deletes up to ?2 messages dispatched before ?1 (ms), oldest ids first, in a
 * transaction of its own per batch (src/stores/sqlite/retention.ts), so a writer never waits for
 * more than one batch. Never touches pending rows.
 *
 * Walks the table by id (its rowid, the table's own order) and stops at the first row created
 * at or after ?1: such a row cannot have been dispatched before ?1, and ids follow creation. So
 * a batch reads the rows it deletes plus the old rows it steps over (dead letters, messages
 * dispatched late), never the young history — a run that finds nothing to prune costs a few
 * reads, not a scan of the retention window. Tried: an index on `dispatched_at`, which costs
 * one more index write for every message dispatched, for a job that runs every few minutes.
 */
export const pruneDispatchedSql = `
DELETE FROM outbox
 WHERE id IN (
   SELECT id FROM outbox
    WHERE id < coalesce((SELECT y.id FROM outbox y WHERE y.created_at >= ?1 ORDER BY y.id LIMIT 1),
                        9223372036854775807)
      AND dispatched_at IS NOT NULL AND dispatched_at < ?1
    ORDER BY id
    LIMIT ?2
 )`;
