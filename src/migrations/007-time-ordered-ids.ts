import type { Migration } from './migration.js';

/**
 * Time-ordered message ids (issue 7, `history_scaling`).
 *
 * `message_id` defaulted to `gen_random_uuid()` (v4, random). Its unique index then takes every
 * new entry on a random leaf page, and so does every UPDATE that is not HOT (claiming and settling
 * a row write new tuple versions, which get new index entries). With millions of dispatched rows
 * kept for retention the index outgrows shared_buffers and each claim and settle reads and dirties
 * random old leaf pages. Measured (bench/, 5,000,000 dispatched rows present vs none, same run
 * setup): 0.60 with the v4 default, 0.98 with v7. A UUIDv7 (RFC 9562: 48-bit Unix milliseconds, then random bits) sorts by creation
 * time, so new and pending rows' entries sit together on the rightmost pages, as `id`'s do.
 *
 * `outbox_uuid_v7()` because `uuidv7()` is built in only from PostgreSQL 18. It overlays the
 * millisecond timestamp on a v4 and sets the version nibble to 7 (bits 52/53 of the v4's 0100
 * become 0111); the variant bits are already RFC 9562's. Existing rows keep their ids: only the
 * default changes, which takes a brief ACCESS EXCLUSIVE lock and rewrites nothing.
 *
 * Tried and left out: `fillfactor = 70`, so the claim's update (no indexed column changes) could
 * be HOT. It sped up draining a small table (bench/ drain, 40,000 rows: 25.6–32.6k rows/s at 100,
 * 33.3–34.1k at 70) but slowed it with 5,000,000 dispatched rows kept (history_scaling 0.65 and
 * 0.74 at 70 vs 0.98 and 1.24 at 100): the history then spans 1/0.7 as many pages. History is
 * what a long-running outbox has, so the default stays. (Revisited in migration 008: measured in
 * alternation on fresh databases, history costs far less than this, and 50 became the default.)
 */
export const timeOrderedIds: Migration = {
  version: 7,
  name: 'time-ordered-ids',
  up: (s) => [
    `
CREATE FUNCTION ${s}.outbox_uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(
    set_bit(
      set_bit(
        overlay(uuid_send(gen_random_uuid())
                PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                FROM 1 FOR 6),
        52, 1),
      53, 1),
    'hex')::uuid
$$`,
    `ALTER TABLE ${s}.outbox ALTER COLUMN message_id SET DEFAULT ${s}.outbox_uuid_v7()`,
  ],
};
