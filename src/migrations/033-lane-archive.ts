import { laneArchiveTableSql } from '../sql/lane-archive.js';
import { lanePruneArchiveFunction033 } from './033-frozen-functions.js';
import { laneSettleParkedFunctionSql } from '../sql/lanes.js';
import type { Migration } from './migration.js';

/**
 * Retention's `archive: true` on the lanes engine (`pruneOutbox`, `outbox prune --archive`, the
 * retention job): before it, an archiving prune left lane messages in place. Adds
 * `outbox_lane_archive`, the column `outbox_lanes.archive_passed` (a constant default:
 * catalog-only), a three-argument `outbox_lane_prune` (the two-argument one stays, for
 * retention of an earlier version), and replaces `outbox_lane_settle_parked` in place (same
 * signature), so that a message retention passed while it was parked is archived when it is
 * published later. sql/lane-archive.ts says why a table of its own. Nothing on the enqueue or
 * on the lane read changes.
 */
export const laneArchive: Migration = {
  version: 33,
  name: 'lane-archive',
  up: (s) => [
    laneArchiveTableSql(s),
    `ALTER TABLE ${s}.outbox_lanes ADD COLUMN archive_passed boolean NOT NULL DEFAULT false`,
    // Replaced by migration 034 (its full-page images compressed): the text 033 created.
    lanePruneArchiveFunction033(s),
    laneSettleParkedFunctionSql(s),
  ],
};
