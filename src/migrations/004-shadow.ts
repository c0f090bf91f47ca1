import type { Migration } from './migration.js';

/**
 * Shadow mode (retrofit, SPEC §4.10): a message written with `shadow: true` goes through the
 * whole outbox path — validated, claimed, leased, settled — but is never handed to a publisher.
 * The old code path keeps performing the effect while the new path's counts are compared.
 * A constant default makes ADD COLUMN a catalog-only change: no table rewrite on a big outbox.
 */
export const shadow: Migration = {
  version: 4,
  name: 'shadow',
  up: (s) => [`ALTER TABLE ${s}.outbox ADD COLUMN shadow boolean NOT NULL DEFAULT false`],
};
