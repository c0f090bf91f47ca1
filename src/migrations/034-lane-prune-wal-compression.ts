import { lanePruneArchiveFunctionSql } from '../sql/lane-archive.js';
import type { Migration } from './migration.js';

/**
 * Retention of the lanes engine compresses the full-page images its DELETEs write
 * (sql/lane-archive.ts `pruneWalCompression` says why and how): `outbox_lane_prune` with three
 * arguments replaced in place, same signature and result. Nothing else changes; a retention
 * job of an earlier version (the two-argument function) runs as before.
 */
export const lanePruneWalCompression: Migration = {
  version: 34,
  name: 'lane-prune-wal-compression',
  up: (s) => [lanePruneArchiveFunctionSql(s)],
};
