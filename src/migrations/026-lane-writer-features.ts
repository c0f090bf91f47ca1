import { laneNextFunction026 } from './026-frozen-functions.js';
import type { Migration } from './migration.js';

/**
 * The lanes writer takes delays, dedupe keys and shadow messages (issue 43: the claim engine's
 * features move onto lanes), with the claim engine's semantics.
 *
 * - `outbox_lane_messages.available_at`: when a delayed message (`delayMs`, `availableAt`) is
 *   due; NULL for every message without a delay, so a nullable ADD COLUMN (catalog only) and
 *   nothing a row without a delay pays but an `IS NULL` test at read time.
 * - `outbox_lane_messages_delayed_idx`: the delayed messages of each lane, by id. Partial: a
 *   message without a delay is not in it (no index write at enqueue), and the read probes it
 *   once a lane to learn whether a message not due yet is within the batch's reach
 *   (sql/lanes.ts `outbox_lane_next`, which parks such a message as a deferral due at its
 *   available_at). `available_at` is included so the probe reads the index alone once the
 *   pages are all-visible.
 * - `outbox_lane_messages.shadow`: as the claim engine's (migration 004), constant default, so
 *   catalog only.
 * - `outbox_lane_next` returns `shadow` (a new result column: dropped and created, not
 *   replaced) and parks messages not due yet. Migration 025's text is frozen in
 *   025-frozen-functions.ts.
 *
 * Dedupe keys need no schema: they go in the claim engine's `outbox_dedupe_keys` (migration
 * 013), admitted by the writer before the messages are written (sql/dedupe.ts
 * `admitLaneDedupeKeysSql` says why), and pruned by the same retention job.
 *
 * The CREATE INDEX reads `outbox_lane_messages` once, holding off lanes writers meanwhile (a
 * SHARE lock; nothing is in the index): retention keeps that table to what is not yet consumed
 * and the retention window (docs/operations.md).
 */
export const laneWriterFeatures: Migration = {
  version: 26,
  name: 'lane-writer-features',
  up: (s) => [
    `ALTER TABLE ${s}.outbox_lane_messages ADD COLUMN available_at timestamptz`,
    `ALTER TABLE ${s}.outbox_lane_messages ADD COLUMN shadow boolean NOT NULL DEFAULT false`,
    `
CREATE INDEX outbox_lane_messages_delayed_idx ON ${s}.outbox_lane_messages (lane, id)
  INCLUDE (available_at) WHERE available_at IS NOT NULL`,
    `
DROP FUNCTION ${s}.outbox_lane_next(text, smallint[], bigint[], bigint[], smallint[], bigint[],
  text[], text[], float8[], boolean, integer, smallint, integer, bigint, bigint, bigint, boolean,
  smallint[], bigint[])`,
    // Replaced by migration 027 (held messages): the text 026 created, frozen.
    laneNextFunction026(s),
  ],
};
