import type { Migration } from './migration.js';

/**
 * Tuning for a table that is written, updated twice and then kept (issue 7).
 *
 * 1. Time-ordered message ids (`history_scaling`).
 *
 * `message_id` defaulted to `gen_random_uuid()` (v4, random). Its unique index then takes every
 * new entry on a random leaf page, and so does every UPDATE that is not HOT (claiming and settling
 * a row write new tuple versions, which get new index entries). With millions of dispatched rows
 * kept for retention the index outgrows shared_buffers and each claim and settle reads and dirties
 * random old leaf pages: the bench measured dispatch at 0.45x with 5,000,000 dispatched rows
 * present. A UUIDv7 (RFC 9562: 48-bit Unix milliseconds, then random bits) sorts by creation
 * time, so new and pending rows' entries sit together on the rightmost pages, as `id`'s do.
 *
 * `outbox_uuid_v7()` because `uuidv7()` is built in only from PostgreSQL 18. It overlays the
 * millisecond timestamp on a v4 and sets the version nibble to 7 (bits 52/53 of the v4's 0100
 * become 0111); the variant bits are already RFC 9562's. Existing rows keep their ids: only the
 * default changes, which takes a brief ACCESS EXCLUSIVE lock and rewrites nothing.
 *
 * 2. `fillfactor = 70`. Every row is updated twice right after it is written (the claim, then the
 *    settle). On a page filled to 100% neither new version fits beside the old one, so each update
 *    goes to another page and dirties it too. Leaving 30% free lets the claim's version (which
 *    changes no indexed column) be a HOT update — no index entries at all — and the settle's
 *    version reuse the space pruned from the claim's. Measured here (bench/ drain, 40,000 rows,
 *    3 rounds): 25.6–32.6k rows/s at 100, 33.3–34.1k at 70, 35.9–38.6k at 50. 70 rather than 50
 *    because kept history costs up to 1/0.7 of the space at 70 and twice at 50. Applies to pages
 *    written from now on; existing pages keep their layout. ALTER TABLE … SET (fillfactor) takes a
 *    SHARE UPDATE EXCLUSIVE lock: reads and writes go on.
 */
export const churnTuning: Migration = {
  version: 7,
  name: 'churn-tuning',
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
    `ALTER TABLE ${s}.outbox SET (fillfactor = 70)`,
  ],
};
