import type { Migration } from './migration.js';

/**
 * The outbox, the per-aggregate sequence counters and the consumer ledger.
 *
 * Column design (SPEC §3): the reference columns keep their names so existing SQL works; the added
 * columns all have defaults or are filled by the trigger, so a plain
 * `INSERT INTO outbox (aggregate_id, topic, payload) VALUES (...)` from any language is a valid
 * message.
 *
 * - `message_id`: globally unique, stable across re-publishes — brokers and consumers dedupe on it.
 * - `sequence`: position within the aggregate, assigned by the trigger under a row lock on the
 *   aggregate's counter (`outbox_aggregates`). A second transaction writing the same aggregate
 *   waits for the first to commit or roll back, so sequence order IS commit order per aggregate,
 *   unlike `id` (a transaction can take id 100 and commit after the one that took 101). The price:
 *   concurrent transactions on the same aggregate serialise — which they must for ordering anyway.
 * - `lease_owner` / `lease_expires_at`: a dispatcher's claim. `lease_owner` is unique per claim
 *   (not per process) so settling can be fenced: only the claim that still holds the lease marks.
 * - `dead_lettered_at`: set when a message stops retrying; it stays undispatched and visible.
 *
 * Indexes are partial on undispatched rows, so the dispatcher's cost follows the backlog, not the
 * table's history.
 */
export const initial: Migration = {
  version: 1,
  name: 'initial',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_aggregates (
  aggregate_id  text   PRIMARY KEY,
  last_sequence bigint NOT NULL
)`,
    `
CREATE TABLE ${s}.outbox (
  id               bigserial   PRIMARY KEY,
  message_id       uuid        NOT NULL DEFAULT gen_random_uuid(),
  aggregate_id     text        NOT NULL,
  topic            text        NOT NULL,
  payload          jsonb       NOT NULL,
  headers          jsonb       NOT NULL DEFAULT '{}'::jsonb,
  sequence         bigint      NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  available_at     timestamptz NOT NULL DEFAULT now(),
  dispatched_at    timestamptz,
  attempts         integer     NOT NULL DEFAULT 0,
  last_error       text,
  lease_owner      text,
  lease_expires_at timestamptz,
  dead_lettered_at timestamptz,
  CONSTRAINT outbox_message_id_key UNIQUE (message_id),
  CONSTRAINT outbox_topic_length CHECK (char_length(topic) BETWEEN 1 AND 255),
  CONSTRAINT outbox_aggregate_id_length CHECK (char_length(aggregate_id) BETWEEN 1 AND 255),
  CONSTRAINT outbox_headers_is_object CHECK (jsonb_typeof(headers) = 'object'),
  CONSTRAINT outbox_attempts_non_negative CHECK (attempts >= 0)
)`,
    `
-- Due work: what the dispatcher scans.
CREATE INDEX outbox_pending_idx ON ${s}.outbox (available_at, id)
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL`,
    `
-- "Is there an earlier undispatched message of this aggregate?" (ordering check, G4).
CREATE INDEX outbox_aggregate_pending_idx ON ${s}.outbox (aggregate_id, sequence)
  WHERE dispatched_at IS NULL`,
    `
-- Dead letters, for status and replay.
CREATE INDEX outbox_dead_letter_idx ON ${s}.outbox (dead_lettered_at)
  WHERE dead_lettered_at IS NOT NULL AND dispatched_at IS NULL`,
    `
CREATE FUNCTION ${s}.outbox_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- Always assigned here, never taken from the INSERT: a caller-chosen sequence could collide.
  INSERT INTO ${s}.outbox_aggregates AS a (aggregate_id, last_sequence)
  VALUES (NEW.aggregate_id, 1)
  ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + 1
  RETURNING a.last_sequence INTO NEW.sequence;
  NEW.headers := coalesce(NEW.headers, '{}'::jsonb);
  NEW.attempts := coalesce(NEW.attempts, 0);
  RETURN NEW;
END
$$`,
    `
CREATE TRIGGER outbox_before_insert BEFORE INSERT ON ${s}.outbox
  FOR EACH ROW EXECUTE FUNCTION ${s}.outbox_before_insert()`,
    `
-- Consumer ledger (the reference design's processed_messages): one row per (consumer, message)
-- whose effect was performed. 'claimed' rows belong to claim-first consumers of external effects.
CREATE TABLE ${s}.processed_messages (
  consumer         text        NOT NULL,
  message_id       text        NOT NULL,
  state            text        NOT NULL DEFAULT 'done',
  processed_at     timestamptz NOT NULL DEFAULT now(),
  lease_expires_at timestamptz,
  PRIMARY KEY (consumer, message_id),
  CONSTRAINT processed_messages_state CHECK (state IN ('claimed', 'done'))
)`,
    `
CREATE INDEX processed_messages_processed_at_idx ON ${s}.processed_messages (processed_at)`,
  ],
};
