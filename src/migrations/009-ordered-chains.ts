import type { Migration } from './migration.js';

/**
 * Ordered dispatch at scale (issue 16): a claim reads ready messages only, never the rows queued
 * behind an aggregate's head.
 *
 * Before: every pending row was in the claim's index, and the claim rejected non-heads one by one
 * (100,000 messages behind one head: 1.9 s per claim, for every aggregate). Now:
 *
 * - `ordered` says, per message, whether it takes part in its aggregate's order. It is decided
 *   ONCE, when the message is written — by the writer (`ordered: false`), by a plain INSERT that
 *   names the column, or else by `outbox_unordered_topics` (LIKE patterns; a topic that matches
 *   none is ordered). Before, each dispatcher's own `--unordered` list decided at claim time, so
 *   two dispatchers with different lists could publish one aggregate out of order.
 * - `ready` marks the rows a claim may start from: unordered messages, and an aggregate's first
 *   pending ordered message (its head). The insert trigger sets it (a new message is the head when
 *   no ordered message of its aggregate is pending), and the settle that ends a head's run marks
 *   the next one (sql/settle.ts). Only ready rows are in `outbox_ready_idx`, so the rows behind a
 *   head — and the heads that are backing off (`available_at` ahead) or dead under `hold` — are not
 *   in the claim's index range at all. `ready` is a hint for the scan; order is still guaranteed by
 *   the claim's head check (one probe), so a stale `true` costs a probe, never order.
 * - `outbox_chain_idx` is the aggregates' chains: pending ordered messages by (aggregate,
 *   sequence). The trigger's "anything pending?" probe, the claim's head check, the run that
 *   follows a head, and the settle's "who is next?" each read its first entries.
 *
 * Why the trigger may decide `ready`: it runs while the writer holds its aggregate's counter row
 * (001), and a settle that leaves an aggregate without pending ordered messages takes that same
 * row (SKIP LOCKED, deferring while a writer holds it) and updates it — so a writer either sees
 * the settle's result or, under REPEATABLE READ, fails with a serialization error and retries.
 * See settle.ts for the race this closes.
 *
 * The trigger function runs with `enable_seqscan = off`. PL/pgSQL caches a generic plan per
 * connection after five calls, and while the outbox is small the probe's cheapest plan IS a
 * sequential scan — which a pooled connection then kept while the table grew: 100,000 inserts
 * into one aggregate took minutes (every insert scanned every pending row). With sequential
 * scans priced out, the cached plan is the index probe at any size. A function-level SET costs a
 * setting swap per call; planning each call instead (`plan_cache_mode = force_custom_plan`)
 * would cost a plan per inserted row.
 *
 * `outbox_pending_idx` (every pending row by due time) is dropped: it was only the old claim's
 * index. Status queries over pending rows use `outbox_aggregate_pending_idx`, which stays.
 *
 * Existing pending rows become ordered (the old default) and their heads ready: one pass over the
 * backlog, not the history. Index builds take a SHARE lock (writers wait): on a large backlog,
 * create the two indexes CONCURRENTLY first, with the same definitions (IF NOT EXISTS skips them).
 */
export const orderedChains: Migration = {
  version: 9,
  name: 'ordered-chains',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_unordered_topics (
  pattern    text        PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT outbox_unordered_topics_pattern CHECK (char_length(pattern) BETWEEN 1 AND 255)
)`,
    // Nullable: NULL on INSERT means "decide from outbox_unordered_topics" (the trigger always
    // sets it). Catalog-only: no rewrite.
    `ALTER TABLE ${s}.outbox ADD COLUMN ordered boolean`,
    `ALTER TABLE ${s}.outbox ADD COLUMN ready boolean NOT NULL DEFAULT false`,
    `UPDATE ${s}.outbox SET ordered = true WHERE dispatched_at IS NULL`,
    `
UPDATE ${s}.outbox o SET ready = true
WHERE o.dispatched_at IS NULL
  AND NOT EXISTS (
    SELECT 1 FROM ${s}.outbox p
    WHERE p.aggregate_id = o.aggregate_id AND p.sequence < o.sequence AND p.dispatched_at IS NULL
  )`,
    `
CREATE INDEX IF NOT EXISTS outbox_ready_idx ON ${s}.outbox (available_at, id)
  WHERE dispatched_at IS NULL AND dead_lettered_at IS NULL AND ready`,
    `
CREATE INDEX IF NOT EXISTS outbox_chain_idx ON ${s}.outbox (aggregate_id, sequence)
  WHERE dispatched_at IS NULL AND ordered`,
    `DROP INDEX IF EXISTS ${s}.outbox_pending_idx`,
    `
CREATE OR REPLACE FUNCTION ${s}.outbox_before_insert() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
BEGIN
  -- Always assigned here, never taken from the INSERT: a caller-chosen sequence could collide.
  -- The counter row stays locked until the writer commits: writers of one aggregate serialise.
  INSERT INTO ${s}.outbox_aggregates AS a (aggregate_id, last_sequence)
  VALUES (NEW.aggregate_id, 1)
  ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + 1
  RETURNING a.last_sequence INTO NEW.sequence;
  NEW.headers := coalesce(NEW.headers, '{}'::jsonb);
  NEW.attempts := coalesce(NEW.attempts, 0);
  IF NEW.ordered IS NULL THEN
    NEW.ordered := NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_unordered_topics u WHERE NEW.topic LIKE u.pattern);
  END IF;
  -- The head of its aggregate when nothing ordered of it is pending (this statement runs with a
  -- fresh snapshot, after the counter row was locked: see settle.ts). Sequence 1 needs no probe.
  NEW.ready := NOT NEW.ordered OR NEW.sequence = 1 OR NOT EXISTS (
    SELECT 1 FROM ${s}.outbox p
    WHERE p.aggregate_id = NEW.aggregate_id AND p.dispatched_at IS NULL AND p.ordered);
  RETURN NEW;
END
$$`,
  ],
};
