import { ASYNC_COMMIT_PREDICATE } from './commit-mode.js';

/**
 * Statements of the LISTEN/NOTIFY wake source (src/dispatcher/wake/listen-notify.ts) on the
 * `outbox_waiters` table of migration 005. Producers notify only while a live waiter row exists,
 * so these statements are what turns producers' NOTIFY cost on and off.
 *
 * Arming and disarming commit without waiting for the WAL flush (commit-mode.ts): the dispatcher
 * flips between them whenever it goes idle and finds work again, and a waiter row lost in a crash
 * is recreated by the reconnect that follows. Visibility to producers is immediate either way.
 */

/**
 * The channel producers notify and dispatchers LISTEN on: `<schema>_outbox`, the schema cut to 56
 * characters because channel names must stay under 64 bytes (must match migration 005's trigger).
 * `schema` is the validated, UNQUOTED schema name.
 */
export const notifyChannel = (schema: string) => `${schema.slice(0, 56)}_outbox`;

/**
 * LISTEN takes an identifier, not a parameter; the channel is built from a validated schema name
 * (a-z, 0-9, _), so quoting it is enough.
 */
export const listenSql = (schema: string) => `LISTEN "${notifyChannel(schema)}"`;

/**
 * Arms producers: "I am idle, wake me". An upsert so the heartbeat can run the same statement to
 * push the expiry forward (and to recreate a row that someone pruned). The expiry is computed by
 * the server's clock — the one the trigger compares with — never by ours.
 *
 * $1 waiter id, $2 time to live in milliseconds.
 */
export const upsertWaiterSql = (schema: string) => `
INSERT INTO ${schema}.outbox_waiters (dispatcher_id, expires_at)
SELECT $1, clock_timestamp() + $2::float8 * interval '1 millisecond'
WHERE ${ASYNC_COMMIT_PREDICATE}
ON CONFLICT (dispatcher_id) DO UPDATE SET expires_at = excluded.expires_at`;

/**
 * Disarms: the dispatcher is busy (it claims again without waiting) or stopping. Producers stop
 * paying for NOTIFY as soon as this commits. $1 waiter id.
 */
export const deleteWaiterSql = (schema: string) =>
  `DELETE FROM ${schema}.outbox_waiters WHERE dispatcher_id = $1 AND ${ASYNC_COMMIT_PREDICATE}`;

/**
 * The heartbeat while not armed: a round trip that proves the LISTEN connection is alive, and
 * that removes rows of dispatchers that crashed long ago (the trigger already ignores expired
 * rows; this only keeps the table tiny). A data-modifying CTE runs even though nothing reads it.
 * Five minutes of grace so a dispatcher whose row expired during a long pause can still refresh
 * it instead of racing a delete.
 */
export const heartbeatSql = (schema: string) => `
WITH pruned AS (
  DELETE FROM ${schema}.outbox_waiters
  WHERE expires_at < clock_timestamp() - interval '5 minutes'
)
SELECT 1 AS alive`;

/**
 * The LISTEN probe (dispatcher/wake/listen-probe.ts): a channel of its own per probe, so that its
 * notification wakes no dispatcher and no earlier probe's registration (left behind on a pooled
 * server connection) ever hears it. `token` is hex from `randomBytes`, so the quoted name needs
 * no escaping; 19 + 16 characters stay under the 63-byte limit.
 */
export const probeChannel = (token: string) => `agent_outbox_probe_${token}`;

export const listenProbeSql = (token: string) => `LISTEN "${probeChannel(token)}"`;

export const unlistenProbeSql = (token: string) => `UNLISTEN "${probeChannel(token)}"`;

/**
 * Sent from another connection than the listener's: `pg_notify` takes the channel as a value.
 * Autocommit, so it is delivered as soon as it returns. $1 channel.
 */
export const notifyProbeSql = `SELECT pg_notify($1, '') IS NULL AS sent`;
