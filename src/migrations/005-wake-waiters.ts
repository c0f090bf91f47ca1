import type { Migration } from './migration.js';

/**
 * Conditional LISTEN/NOTIFY wake-ups (issue 7).
 *
 * A `pg_notify` in every enqueue transaction costs producers dearly: a notifying commit takes a
 * database-wide lock (PreCommit_Notify), so notifying commits serialise. Measured here: enqueue
 * at 8 clients drops to ~0.42x. A dispatcher only needs a wake-up while it is idle and waiting; a
 * busy one claims again at once anyway. So:
 *
 * - `outbox_waiters` holds one row per idle, listening dispatcher. The wake source inserts it
 *   when the dispatcher goes idle and deletes it when it finds work again. Rows expire
 *   (`expires_at`, refreshed by the wake source's heartbeat) so a crashed dispatcher's row stops
 *   producers from notifying after a few seconds instead of forever.
 * - `outbox_wake_waiters` is a DEFERRABLE INITIALLY DEFERRED constraint trigger: it runs at
 *   COMMIT, not at INSERT, so a dispatcher that armed while the producer's transaction was open
 *   is still seen (the remaining race is the instant between this check and the commit record;
 *   the dispatcher's poll interval covers it). A transaction-local setting makes only the first
 *   row of a transaction look at the table: at most one probe and one NOTIFY per transaction,
 *   whatever the batch size.
 *
 * Rejected: a plain statement trigger (checks at INSERT time, misses a dispatcher that armed
 * while the producer's transaction was still open); NOTIFY from the writer (plain INSERTs from
 * other languages would never wake anyone); an unconditional NOTIFY (the cost above).
 *
 * The channel is `<schema>_outbox` (schema cut to 56 characters: channel names must stay under
 * 64 bytes or pg_notify raises), computed from TG_TABLE_SCHEMA so the function text does not
 * depend on the schema name.
 */
export const wakeWaiters: Migration = {
  version: 5,
  name: 'wake-waiters',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_waiters (
  dispatcher_id text        PRIMARY KEY,
  expires_at    timestamptz NOT NULL
)`,
    `
CREATE FUNCTION ${s}.outbox_wake_waiters() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  guard text := 'agent_outbox.woke_' || TG_TABLE_SCHEMA;
BEGIN
  -- Once per transaction: later rows of the same commit return here at the cost of one lookup.
  IF coalesce(current_setting(guard, true), '') = '1' THEN
    RETURN NULL;
  END IF;
  PERFORM set_config(guard, '1', true);
  -- clock_timestamp(), not now(): now() is the transaction's start, and a long transaction
  -- would otherwise treat a waiter row that expired meanwhile as live.
  IF EXISTS (SELECT 1 FROM ${s}.outbox_waiters WHERE expires_at > clock_timestamp()) THEN
    PERFORM pg_notify(left(TG_TABLE_SCHEMA, 56) || '_outbox', '');
  END IF;
  RETURN NULL;
END
$$`,
    `
CREATE CONSTRAINT TRIGGER outbox_wake_waiters AFTER INSERT ON ${s}.outbox
  DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION ${s}.outbox_wake_waiters()`,
  ],
};
