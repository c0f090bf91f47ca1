import {
  laneEnqueueFunctionSql,
  laneInboxInsertFunctionSql,
  laneInboxTriggerSql,
  laneInboxViewSql,
} from '../sql/lane-enqueue.js';
import { laneSkipDeadFunctionSql } from '../sql/lane-admin.js';
import type { Migration } from './migration.js';

/**
 * Plain-SQL enqueue on the lanes engine (issue 43: the claim engine's features move onto lanes).
 * The claim engine's insert trigger lets any language write a message with a plain `INSERT INTO
 * outbox`; the lanes engine has no trigger on `outbox_lane_messages` on purpose (its enqueue cost
 * is a benchmark target), so other languages get a function and a view instead
 * (sql/lane-enqueue.ts holds the design, the guarantees and what was rejected):
 *
 * - `outbox_lane_enqueue(topic, aggregate_id, payload, headers, delay_ms, available_at, ordered,
 *   shadow)`: one message in the caller's transaction, with the writer's guarantees (the counter
 *   row locked before the id is taken, so sequence and id order are commit order within an
 *   aggregate; lane, ordered, delay, NOTIFY while a dispatcher waits) and its validation.
 * - `outbox_lane_inbox`: a view with no rows whose INSTEAD OF INSERT trigger calls the function
 *   per row, so `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload) VALUES ...
 *   RETURNING id` works, several rows included.
 *
 *
 * And Skip for a lanes dead letter (the dashboard's button, `skipLaneDeadLetters`):
 * `outbox_lane_skip_dead(message_ids)` gives up dead letters that hold their aggregate (`hold`),
 * as if they had died under `skip`, and makes the aggregate's next parked message head
 * (sql/lane-admin.ts says why it is a function: it takes the lanes' decision lock before it
 * reads what is parked). One migration for both: they shipped together.
 *
 * Nothing existing changes: no table, index, trigger or function of 024–028 is touched, so a
 * dispatcher or writer of version 29 runs on unchanged; the upgrade is catalog only.
 */
export const laneSqlEnqueueAndSkip: Migration = {
  version: 30,
  name: 'lane-sql-enqueue-and-skip',
  up: (s) => [
    laneEnqueueFunctionSql(s),
    laneInboxViewSql(s),
    laneInboxInsertFunctionSql(s),
    laneInboxTriggerSql(s),
    laneSkipDeadFunctionSql(s),
  ],
};
