import type { Migration } from './migration.js';

/**
 * Every claim a HOT update (issue 43, `wal_per_message_ratio`): `fillfactor = 40` on `outbox`,
 * down from migration 008's 50.
 *
 * A claim writes `lease_owner` (the dispatcher's id and claim number, 20–70 bytes) and
 * `lease_expires_at` where the row had NULLs, so its new version is 30–80 bytes LONGER than the
 * row the writer inserted. At 50 the free half of a page holds one new version per row only if
 * the versions are no longer than the rows; a claim updates every row of a page in one statement
 * (the old versions are its own, not prunable yet), so the last row or two of each page did not
 * fit and moved: a non-HOT update, a new entry in each of the five indexes. Measured with the
 * bench's rows (~200 bytes, one message per aggregate; `wal_per_message_ratio`, 5,000 messages,
 * 2026-12-04): 5–6 % of claims moved, 31–37 bytes of WAL per message (the UPDATE record and four
 * or five index inserts, more after a checkpoint: the index pages' full-page images), dispatch WAL
 * without full-page images 0.324–0.334 of the enqueue's at 50 against 0.285 at 40 (every claim
 * HOT). 40 leaves room for versions up to 50 % longer than the rows, which covers the smallest
 * row the schema allows (~130 bytes) with a 70-byte owner; 45 covered the bench's rows only.
 *
 * The cost: pending rows take 1.25x the heap pages they took at 50 (a bulk-loaded backlog; history
 * written by the dispatcher is deleted by the settle and its space reused). The enqueue's WAL per
 * message did not move (a new page is one `INSERT+INIT` record per ~17 rows).
 *
 * As in 008, only pages written from now on follow the setting, and SET (fillfactor) takes a
 * SHARE UPDATE EXCLUSIVE lock, which blocks neither writers nor the dispatcher.
 */
export const claimFillfactor: Migration = {
  version: 23,
  name: 'claim-fillfactor',
  up: (s) => [`ALTER TABLE ${s}.outbox SET (fillfactor = 40)`],
};
