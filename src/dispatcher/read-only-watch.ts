import type { DispatcherEventMap, TypedEmitter } from './events.js';

/**
 * SQLSTATE 25006 `read_only_sql_transaction`: "cannot execute UPDATE in a read-only
 * transaction". What every claim and settle gets while the database refuses writes — a managed
 * Postgres in maintenance, `default_transaction_read_only` set, a standby reached before it was
 * promoted.
 */
export const READ_ONLY_SQLSTATE = '25006';

/** Was `error` the database refusing a write? */
export function isReadOnlyError(error: unknown): boolean {
  return (
    typeof error === 'object' &&
    error !== null &&
    (error as { code?: unknown }).code === READ_ONLY_SQLSTATE
  );
}

/**
 * Turns a dispatcher's claim and settle outcomes into two transitions: the first claim or
 * settle refused as read-only emits `dispatcher:database:read-only` (once, however many polls
 * fail after it), the first one that goes through after it `dispatcher:database:writable`.
 *
 * Nothing else changes while the database is read-only, and nothing needs to: a refused claim
 * leases nothing and charges no attempt; a refused settle leaves the messages leased, to be
 * claimed again (same message id) once the lease expires and the database takes writes. So no
 * message is dead-lettered by a read-only spell, and order holds. This only makes it visible
 * (log line, `outbox_database_read_only`, `/healthz`).
 *
 * Returns what unsubscribes.
 */
export function watchReadOnly(
  events: TypedEmitter<DispatcherEventMap>,
  now: () => number = Date.now,
): () => void {
  let since: number | undefined;
  const refused = (error: Error) => {
    if (!isReadOnlyError(error) || since !== undefined) return;
    since = now();
    events.emit('dispatcher:database:read-only', { error });
  };
  const accepted = () => {
    if (since === undefined) return;
    const readOnlyMs = now() - since;
    since = undefined;
    events.emit('dispatcher:database:writable', { readOnlyMs });
  };
  const off = [
    events.on('dispatcher:claim:failure', ({ error }) => refused(error)),
    events.on('dispatcher:settle:failure', ({ error }) => refused(error)),
    events.on('dispatcher:claim:success', accepted),
    events.on('dispatcher:settle:success', accepted),
  ];
  return () => off.forEach((unsubscribe) => unsubscribe());
}
