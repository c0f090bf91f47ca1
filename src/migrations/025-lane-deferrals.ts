import { laneNextFunction025, laneSettleParkedFunction025 } from './025-frozen-functions.js';
import type { Migration } from './migration.js';

/**
 * Destination pauses and rate limits on the lanes engine (G9, issue 43): a message whose route
 * is paused, probing, or out of rate-limit tokens is parked without an attempt and comes due
 * after the delay. A message read from a lane is parked so by `outbox_lane_next` as before (kind
 * 'unsent' with a delay: attempts 0); what the parked path publishes is settled by
 * `outbox_lane_settle_parked`, which now takes 'defer' (the delay, the reason, attempts as they
 * were).
 *
 * And a fix found on the way: `outbox_lane_next`, reading a lane with a parked aggregate, parked
 * again a row of that aggregate that came before the parked one and had been published (the read
 * starts at the position the horizon capped, so rows published above it come back): published
 * twice, the second time after its successor. Only rows after a blocking parked row of their
 * aggregate are behind it now (test: lane-destination-limits.test.ts, two dispatchers under a
 * rate limit). Migration 024's texts of both functions are frozen in 024-frozen-functions.ts.
 */
export const laneDeferrals: Migration = {
  version: 25,
  name: 'lane-deferrals',
  // Both functions were replaced later (026, 033): the texts 025 created, frozen.
  up: (s) => [laneNextFunction025(s), laneSettleParkedFunction025(s)],
};
