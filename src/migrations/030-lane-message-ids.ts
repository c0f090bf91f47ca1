import { laneRecordV7IdsFunctionSql } from '../sql/lane-message-ids.js';
import type { Migration } from './migration.js';

/**
 * A bounded effect status by message id on the lanes engine (sql/effect-status.ts): the writer's
 * message ids become version 8 UUIDs that name their row's lane and id (sql/lane-message-ids.ts;
 * the writer of this release writes them on any schema since 026: they are computed in its
 * INSERT, nothing here is needed for them), and the ids written before stay findable:
 *
 * - `outbox_lane_v7_ids`: the place (lane, id) of each lane message whose id is not version 8,
 *   by message id. Filled here, under a SHARE lock on `outbox_lane_messages` (lanes writers wait
 *   for the migration; dispatchers do not write the table), by
 *   `outbox_lane_record_v7_ids()`, which an operator may run again after writers of an earlier
 *   release stopped (docs/operations.md). No index on `outbox_lane_messages` itself: any costs
 *   every enqueue (the figures are in sql/effect-status.ts).
 *
 * The column's default stays `outbox_uuid_v7()`: it only serves a writer of an earlier release
 * (this release's always gives the id), whose rows the function above records.
 */
export const laneMessageIds: Migration = {
  version: 30,
  name: 'lane-message-ids',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_lane_v7_ids (
  message_id uuid     PRIMARY KEY,
  lane       smallint NOT NULL,
  id         bigint   NOT NULL
)`,
    laneRecordV7IdsFunctionSql(s),
    `LOCK TABLE ${s}.outbox_lane_messages IN SHARE MODE`,
    `SELECT ${s}.outbox_lane_record_v7_ids()`,
  ],
};
