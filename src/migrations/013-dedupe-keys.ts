import type { Migration } from './migration.js';

/**
 * One effect per business key: a message can carry a `dedupe_key` (`'charge:order-42'`), and a
 * second message with the same key written within the key's window is not written at all.
 *
 * Where the key is remembered: `outbox_dedupe_keys`, not the outbox row. Retention deletes
 * dispatched rows after 30 days by default (sql/retention.ts), and a duplicate arriving after
 * that must still be recognised for as long as its window says — so the key lives in its own
 * small table with its own expiry (`expires_at`, the writer's `dedupeWindowMs`, default 30 days)
 * and its own pruning (sql/dedupe.ts, run by the retention job). It holds the first message's id,
 * row id, topic, aggregate and sequence, so a duplicate can be answered with that message even
 * after its row is gone. No foreign key to `outbox`: the key must outlive the row.
 *
 * Columns added to `outbox` (NULL on every message without a key; catalog-only ADD COLUMNs):
 * - `dedupe_key`: the key, 1-255 characters.
 * - `dedupe_expires_at`: when the key stops deduplicating; default written + 30 days (as
 *   `approval_expires_at` defaults to written + 7 days). The writer sets it from its window.
 *
 * How a duplicate is dropped: `outbox_admit_dedupe_before_insert`, a BEFORE INSERT trigger that
 * runs only for rows with a key (`WHEN`), so every other insert — the writer's keyless statement,
 * a plain INSERT without the column — pays nothing, not even a function call. Per keyed row it
 * inserts the key; `ON CONFLICT DO UPDATE ... WHERE k.expires_at <= now()` takes over an expired
 * key, and when the key is live the UPDATE does nothing, nothing is RETURNed, and the trigger
 * returns NULL: the row is silently not inserted (`INSERT 0 0`, no RETURNING row), like
 * `ON CONFLICT DO NOTHING`. Why not raise: a plain INSERT in a business transaction would abort
 * that transaction for a duplicate that is, by definition, already taken care of.
 *
 * Concurrency: a second transaction inserting a key the first holds uncommitted waits on the
 * unique index until the first commits or rolls back (Postgres' ON CONFLICT). Committed: under
 * READ COMMITTED the conflict is re-checked against the committed key, which is live, so the
 * second row is dropped without an error. Rolled back: the second inserts the key and its row.
 * Under REPEATABLE READ or SERIALIZABLE the second fails with serialization_failure (40001)
 * instead, as any ON CONFLICT on a row its snapshot cannot see does; its retry is deduplicated.
 *
 * Trigger order: Postgres fires BEFORE triggers by name, and the key is claimed FIRST —
 * `outbox_admit…` sorts before `outbox_before_insert` (the sequence counter). A dropped duplicate
 * therefore never takes its aggregate's counter lock nor a sequence number: no gap, which a
 * `strict` consumer (consumer/ordering.ts) would wait on forever. The key row learns the first
 * message's sequence from `outbox_dedupe_sequence_before_insert`, which sorts after the counter
 * (and before `outbox_hold_before_insert`; a dropped row reaches neither): one HOT update of the
 * key row, paid by keyed messages only. Rejected: one trigger after the counter, which cost each
 * duplicate a sequence number (the gap) and, to avoid it, would have had to give the number back
 * by decrementing `outbox_aggregates` — reaching into the counter's own bookkeeping; and a CTE
 * in the writer's statement instead of a trigger, whose statement snapshot cannot see a key
 * committed while it waited — a plain INSERT would also have had no deduplication at all.
 *
 * Also here (issue 28, approvals with a deadline): `approval_on_expiry`, what the expiry sweep
 * does with a held message no one decided in time — NULL or `reject`: expired, as before;
 * `approve`: approved, decided by `expiry` (sql/approvals.ts `expireSql`). A plain INSERT may set
 * it next to `approval_state = 'awaiting'`.
 *
 * The CHECK constraints are NOT VALID: every existing row is NULL, and validating would scan
 * the table under an exclusive lock (as migration 010).
 */
export const dedupeKeys: Migration = {
  version: 13,
  name: 'dedupe-keys',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_dedupe_keys (
  dedupe_key   text        PRIMARY KEY,
  message_id   uuid        NOT NULL,
  id           bigint      NOT NULL,
  topic        text        NOT NULL,
  aggregate_id text        NOT NULL,
  sequence     bigint,
  created_at   timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  CONSTRAINT outbox_dedupe_keys_key_length CHECK (char_length(dedupe_key) BETWEEN 1 AND 255)
)`,
    `
-- Pruning walks expired keys oldest first (sql/dedupe.ts).
CREATE INDEX outbox_dedupe_keys_expires_at_idx ON ${s}.outbox_dedupe_keys (expires_at)`,
    `ALTER TABLE ${s}.outbox ADD COLUMN dedupe_key text`,
    `ALTER TABLE ${s}.outbox ADD COLUMN dedupe_expires_at timestamptz`,
    `
ALTER TABLE ${s}.outbox ADD CONSTRAINT outbox_dedupe_key_length
  CHECK (char_length(dedupe_key) BETWEEN 1 AND 255) NOT VALID`,
    `
CREATE FUNCTION ${s}.outbox_admit_dedupe() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  NEW.dedupe_expires_at := coalesce(NEW.dedupe_expires_at, NEW.created_at + interval '30 days');
  INSERT INTO ${s}.outbox_dedupe_keys AS k
    (dedupe_key, message_id, id, topic, aggregate_id, expires_at)
  VALUES (NEW.dedupe_key, NEW.message_id, NEW.id, NEW.topic, NEW.aggregate_id,
          NEW.dedupe_expires_at)
  ON CONFLICT (dedupe_key) DO UPDATE
    SET message_id = EXCLUDED.message_id, id = EXCLUDED.id, topic = EXCLUDED.topic,
        aggregate_id = EXCLUDED.aggregate_id, sequence = NULL,
        created_at = now(), expires_at = EXCLUDED.expires_at
    WHERE k.expires_at <= now();
  IF FOUND THEN
    RETURN NEW;
  END IF;
  -- A live key: a message with it was written within its window. Not written (see above).
  RETURN NULL;
END
$$`,
    `
CREATE TRIGGER outbox_admit_dedupe_before_insert BEFORE INSERT ON ${s}.outbox
  FOR EACH ROW WHEN (NEW.dedupe_key IS NOT NULL)
  EXECUTE FUNCTION ${s}.outbox_admit_dedupe()`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_on_expiry text`,
    `
ALTER TABLE ${s}.outbox ADD CONSTRAINT outbox_approval_on_expiry
  CHECK (approval_on_expiry IN ('reject', 'approve')) NOT VALID`,
    `
CREATE FUNCTION ${s}.outbox_dedupe_sequence() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- Runs after outbox_before_insert assigned the sequence; the key row is this row's (admitted).
  UPDATE ${s}.outbox_dedupe_keys SET sequence = NEW.sequence WHERE dedupe_key = NEW.dedupe_key;
  RETURN NEW;
END
$$`,
    `
CREATE TRIGGER outbox_dedupe_sequence_before_insert BEFORE INSERT ON ${s}.outbox
  FOR EACH ROW WHEN (NEW.dedupe_key IS NOT NULL)
  EXECUTE FUNCTION ${s}.outbox_dedupe_sequence()`,
  ],
};
