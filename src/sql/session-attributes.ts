/**
 * What a multi-host connection string (`target_session_attrs`, store/multi-host-url.ts) asks of a
 * session: is the server a standby (`pg_is_in_recovery()`), and does this session refuse writes
 * (`transaction_read_only`, which is on in a standby, and also on a primary with
 * `default_transaction_read_only` set — a managed database in maintenance, a database an
 * operator froze).
 *
 * One round trip, run once per new connection of a multi-host pool; nothing of the outbox's.
 *
 * Tried and rejected: libpq's own way, the `in_hot_standby` and `default_transaction_read_only`
 * parameters PostgreSQL 14+ reports at login (GUC_REPORT), costs no query — but `pg` keeps those
 * reports only as events on the connection, not as state to read after `connect()`, and older
 * servers do not send `in_hot_standby`; `SHOW transaction_read_only` alone cannot tell a standby
 * (what `primary` and `standby` ask about) from a read-only primary.
 */
export const sessionAttributesSql = `SELECT pg_is_in_recovery() AS in_recovery,
       current_setting('transaction_read_only') = 'on' AS read_only`;

/** A row of {@link sessionAttributesSql}. */
export interface SessionAttributes {
  in_recovery: boolean;
  read_only: boolean;
}
