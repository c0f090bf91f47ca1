import { laneNextFunction031 } from './031-frozen-functions.js';
import type { Migration } from './migration.js';

/**
 * A fix of `outbox_lane_next` (same signature, replaced in place): a delayed or held message
 * committed while a call was reading its lanes could be returned by the read of a lane that the
 * call had seen without one, and published at once — before its delay, or without its approval.
 * The call decides how to read each lane from one snapshot (its loop over the lanes) and reads
 * it with another (the lane's statement). The fast read now stops before the first delayed or
 * held row it sees (the next call parks it), and a lane with delayed messages that are all due
 * (or rows published ahead by a tenant share) is read row by row, as one with a message not due
 * is: its own check-then-read had the same gap. sql/lanes.ts has the reasoning; migration 028's
 * text is frozen in 028-frozen-functions.ts. A dispatcher of the previous version calls the same
 * function and gets the fix.
 */
export const laneReadSnapshot: Migration = {
  version: 31,
  name: 'lane-read-snapshot',
  up: (s) => [laneNextFunction031(s)],
};
