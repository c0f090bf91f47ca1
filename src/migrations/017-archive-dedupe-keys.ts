import type { Migration } from './migration.js';

/**
 * `outbox_archive` keeps what migration 013 added to a message: its dedupe key (the business key
 * an audit looks a charge up by, e.g. `charge:order-42`) and what its approval deadline did
 * (`approval_on_expiry`, with `approval_expires_at`). Until now `outbox prune --archive` dropped
 * them. Rows archived before stay NULL there. Plain nullable columns: a catalog change, nothing
 * rewritten. The key's own window (`dedupe_expires_at`) is not kept: an archived message
 * deduplicates nothing, its key lives on in `outbox_dedupe_keys` for as long as its window runs.
 */
export const archiveDedupeKeys: Migration = {
  version: 17,
  name: 'archive-dedupe-keys',
  up: (s) => [
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN dedupe_key text`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_expires_at timestamptz`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_on_expiry text`,
  ],
};
