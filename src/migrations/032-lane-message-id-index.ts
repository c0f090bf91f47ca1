import type { Migration } from './migration.js';

/**
 * A unique index on `outbox_lane_messages.message_id`: the effect status of a message asked by
 * its message id (what an agent holds: `enqueue()`'s answer, an idempotency key, a consumer's
 * envelope) is an index probe instead of a sequential scan of everything retention keeps
 * (sql/effect-status.ts `laneMessagesStatusSql`; docs/lanes.md had the scan at 3,588 buffers and
 * 19–25 ms beside 100,000 messages, growing with the retention window).
 *
 * Left out before because every enqueue pays for it. Measured (2026-12-06, session 29):
 * interleaved blocks of 100 business transactions with two messages each, two databases, with
 * and without this index, medians of 40 blocks: 0.917 vs 0.921 ms and 0.933 vs 0.932 ms a
 * transaction — below this machine's noise. A UUIDv7 (`outbox_uuid_v7()`) sorts by time, so new
 * entries go to the index's rightmost pages, as the primary key's do.
 *
 * Unique, as the claim engine's `outbox.message_id` is: a message id is what consumers
 * deduplicate on, and two messages sharing one would make a consumer drop the second as a
 * duplicate; an INSERT that would do so now fails, and its transaction writes nothing.
 *
 * Building the index reads the table under a SHARE lock, which blocks writers for that time.
 * `IF NOT EXISTS`: on a large table build it first without blocking writers, with the same
 * definition and `CREATE UNIQUE INDEX CONCURRENTLY`, and this migration then skips it.
 */
export const laneMessageIdIndex: Migration = {
  version: 32,
  name: 'lane-message-id-index',
  up: (s) => [
    `CREATE UNIQUE INDEX IF NOT EXISTS outbox_lane_messages_message_id_key ON ${s}.outbox_lane_messages (message_id)`,
  ],
};
