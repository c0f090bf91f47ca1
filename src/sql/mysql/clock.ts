/**
 * The MySQL/MariaDB outbox keeps times as BIGINT milliseconds since the epoch (like the SQLite
 * store, src/sql/sqlite/schema.ts), and reads them from ONE clock: the database server's. The
 * trigger stamps `created_at`/`available_at`, the claim compares leases, the settle stamps
 * `dispatched_at` — all with this expression, so dispatchers on hosts with skewed clocks still
 * agree on when a lease ran out.
 *
 * `UNIX_TIMESTAMP(NOW(3))` converts the session's local time back to the epoch: exact in UTC
 * sessions (the store's own connections set `time_zone = '+00:00'`); in a session on a zone
 * with daylight saving, the one repeated hour of autumn is ambiguous, so a message written by
 * such a session during that hour may be stamped up to an hour early. `NOW(3)` is the
 * statement's start time, the same for every row of a multi-row statement.
 *
 * Tried: DATETIME(3) columns with `NOW(3)` (the value depends on each session's `time_zone`, so
 * two sessions on different zones disagree by hours) and TIMESTAMP(3) (converted per session,
 * but ends in 2038 and carries MariaDB's auto-update defaults).
 */
export const NOW_MS = 'CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)';
