import { claimFunctionSql } from '../sql/claim.js';
import {
  laneEnterTriggerSql,
  laneSequencesSql,
  pendingPredecessorFunctionSql,
} from '../sql/lane.js';
import { settleAdvanceFunction012 } from './012-frozen-settle.js';
import { insertTriggerFunction012 } from './012-frozen-trigger.js';
import type { Migration } from './migration.js';

/**
 * The outbox stays fast beside a held snapshot (issue 25): claims start at the lane's floor
 * (sql/lane.ts), and the order checks are one primary-key probe each.
 *
 * - `outbox.prev_id`: the id of the aggregate's previous ordered message, set by the insert
 *   trigger from `outbox_aggregates.last_ordered_id` (and `prev_ordered_id`, which only carries
 *   the old value out of the upsert). The trigger's "is anything of my aggregate pending?" and the
 *   claim's head check become "is my predecessor pending?": before, both walked
 *   `outbox_chain_idx` over every entry of the aggregate that a held snapshot kept from vacuum.
 * - `outbox_settle_advance` re-created with `jit = off` (claim.ts says why), its query unchanged.
 * - The lane (sql/lane.ts): four sequences for the floor and the pair, the insert trigger giving a
 *   ready row its key after the writer has its xid, `outbox_lane_enter` doing the same for rows
 *   that come back, and `outbox_claim` starting its scan at the floor.
 *
 * Existing rows: pending ordered messages get their `prev_id` (the previous pending one of the
 * aggregate, NULL for the head), aggregates with pending ordered messages their
 * `last_ordered_id`: one pass over the backlog. An aggregate with nothing pending needs nothing (no
 * predecessor to wait for). The floor starts at the beginning of time, so the first claim walks
 * what is in `outbox_ready_idx` once and moves it up.
 *
 * A rolling upgrade is safe: a dispatcher of an earlier version calls `outbox_claim` and
 * `outbox_settle_advance` by name and gets the new functions at its next call; its own statements
 * (retry, release, replay, repair) put rows back into the lane, and `outbox_lane_enter` gives them
 * their key whatever version wrote them. ADD COLUMN without a default is catalog-only; the
 * migration's ACCESS EXCLUSIVE lock on `outbox` lasts as long as the backfill.
 */
export const laneFloor: Migration = {
  version: 12,
  name: 'lane-floor',
  up: (s) => [
    `ALTER TABLE ${s}.outbox ADD COLUMN prev_id bigint`,
    `ALTER TABLE ${s}.outbox_aggregates ADD COLUMN last_ordered_id bigint`,
    `ALTER TABLE ${s}.outbox_aggregates ADD COLUMN prev_ordered_id bigint`,
    `
UPDATE ${s}.outbox o SET prev_id = c.prev
FROM (
  SELECT id, lag(id) OVER (PARTITION BY aggregate_id ORDER BY sequence) AS prev
  FROM ${s}.outbox
  WHERE dispatched_at IS NULL AND ordered
) c
WHERE o.id = c.id AND c.prev IS NOT NULL`,
    `
UPDATE ${s}.outbox_aggregates a SET last_ordered_id = l.id
FROM (
  SELECT DISTINCT ON (aggregate_id) aggregate_id, id
  FROM ${s}.outbox
  WHERE dispatched_at IS NULL AND ordered
  ORDER BY aggregate_id, sequence DESC
) l
WHERE a.aggregate_id = l.aggregate_id`,
    ...laneSequencesSql(s),
    pendingPredecessorFunctionSql(s),
    insertTriggerFunction012(s),
    ...laneEnterTriggerSql(s),
    claimFunctionSql(s),
    settleAdvanceFunction012(s),
  ],
};
