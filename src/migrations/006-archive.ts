import type { Migration } from './migration.js';

/**
 * Retention (SPEC §4.9): an index to find old dispatched rows, and `outbox_archive` for
 * `outbox prune --archive`.
 *
 * - `outbox_dispatched_at_idx` is partial on DISPATCHED rows, the mirror image of the pending
 *   indexes: retention batches read it oldest first (`ORDER BY dispatched_at LIMIT n`), so a batch
 *   costs its size however large the table, and the dashboard's "last hour" latency query is a
 *   range scan. Settling already changes `dispatched_at`, a column of the pending indexes'
 *   predicates, so the update was never HOT: the index adds one index entry per dispatched row
 *   and no heap cost. Without it every batch would walk the primary key past the retained rows.
 *   `IF NOT EXISTS`: on a large existing outbox, build it first without blocking writers
 *   (`CREATE INDEX CONCURRENTLY outbox_dispatched_at_idx ...` with the same definition) and this
 *   migration then skips it.
 * - `outbox_archive` has the outbox's message columns (not the lease columns: an archived row is
 *   settled for good) plus `archived_at`. No sequence default on `id`: rows keep their outbox id.
 *   No trigger: archiving must not touch `outbox_aggregates`, whose counters stay so sequences
 *   never restart. Prune the archive with plain SQL when you no longer need it.
 */
export const archive: Migration = {
  version: 6,
  name: 'archive',
  up: (s) => [
    `
CREATE INDEX IF NOT EXISTS outbox_dispatched_at_idx ON ${s}.outbox (dispatched_at)
  WHERE dispatched_at IS NOT NULL`,
    `
CREATE TABLE ${s}.outbox_archive (
  id            bigint      PRIMARY KEY,
  message_id    uuid        NOT NULL,
  aggregate_id  text        NOT NULL,
  topic         text        NOT NULL,
  payload       jsonb       NOT NULL,
  headers       jsonb       NOT NULL,
  sequence      bigint      NOT NULL,
  created_at    timestamptz NOT NULL,
  available_at  timestamptz NOT NULL,
  dispatched_at timestamptz NOT NULL,
  attempts      integer     NOT NULL,
  last_error    text,
  shadow        boolean     NOT NULL,
  archived_at   timestamptz NOT NULL DEFAULT now()
)`,
  ],
};
