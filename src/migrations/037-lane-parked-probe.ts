import { laneNextFunctionSql } from '../sql/lanes.js';
import type { Migration } from './migration.js';

/**
 * A fix of `outbox_lane_next` (same signature, replaced in place): its row-by-row read probes
 * `outbox_lane_parked` by primary key for each delayed row it meets. Once the table had
 * statistics the planner turned that probe into a hashed subplan, built by walking the whole
 * primary key: under a held snapshot, every parked row ever deleted (G7: 4,961 buffers a batch
 * instead of 20). The probe is kept a probe (sql/lanes.ts); migration 031's text is frozen in
 * 031-frozen-functions.ts. A dispatcher of the previous version calls the same function.
 */
export const laneParkedProbe: Migration = {
  version: 37,
  name: 'lane-parked-probe',
  up: (s) => [laneNextFunctionSql(s)],
};
