import {
  laneBalanceFunctionSql,
  laneHorizonFunctionSql,
  lanePromoteFunctionSql,
  lanePruneFunctionSql,
} from '../sql/lanes.js';
import { laneNextFunction024, laneSettleParkedFunction024 } from './024-frozen-functions.js';
import type { Migration } from './migration.js';

/** How many lanes migration 024 creates (see {@link lanes}). Fixed: a message's lane is a hash. */
export const LANE_COUNT = 16;

/**
 * The lanes engine (issue 43): a consume path that writes per batch and per failure, not per
 * message. Built beside the claim engine; `createOutbox({ engine: 'lanes' })` writes here and
 * `createLaneDispatcher` publishes from here (src/lanes/).
 *
 * The shape, measured first in bench/prototypes/cursor-lanes.ts:
 * - `outbox_lane_messages` is append-only: a consumer never updates or deletes a row. Its one index
 *   is the primary key `(lane, id)`; the lane is a hash of the aggregate, so an aggregate's
 *   messages are one lane's, in id order.
 * - `outbox_lanes`: one row per lane with its cursor (the last id consumed) and its lease (owner,
 *   expiry). A dispatcher owns a lane while its lease lasts (G3 by the lane, not by the row) and
 *   moves the cursor once per batch: one HOT update a batch (fillfactor 20: the 16 rows churn).
 * - `outbox_lane_parked`: what a failure sets aside, so that the cursor can move on. A failed
 *   message is parked with its attempts, error and next attempt; an ordered one parks its
 *   aggregate: every later message of it is parked behind it as the cursor reaches it, and they
 *   leave the table in id order as each is published (G4; other aggregates keep flowing). Writes
 *   per failure only.
 * - Ids come from `outbox_lane_ids`, taken AFTER the writer's aggregate counter row is locked
 *   (which also gives its transaction an xid): writers of one aggregate serialise on that row, so
 *   id order is commit order within an aggregate, and `sequence` (from `outbox_aggregates`, shared
 *   with the claim engine) numbers an aggregate's messages densely in that order.
 * - The horizon: a cursor never passes the highest id no running transaction can still commit
 *   (sql/lanes.ts `outbox_lane_horizon`; each dispatcher keeps its own, nothing is written for
 *   it). What is visible above it may be published already: an aggregate's ids are in its commit
 *   order, so a visible row's predecessors are visible too.
 *
 * Why it is immune to a held snapshot: the reader starts each lane at its cursor through the
 * primary key, and nothing below a cursor is ever read again; the only rows that churn are the 16
 * lane rows (their dead versions are what a held snapshot keeps: 16 × batches, a page or two).
 */
export const lanes: Migration = {
  version: 24,
  name: 'lanes',
  up: (s) => [
    `CREATE SEQUENCE ${s}.outbox_lane_ids AS bigint`,
    `
CREATE TABLE ${s}.outbox_lane_messages (
  lane         smallint    NOT NULL,
  id           bigint      NOT NULL,
  message_id   uuid        NOT NULL DEFAULT ${s}.outbox_uuid_v7(),
  aggregate_id text        NOT NULL,
  sequence     bigint      NOT NULL,
  ordered      boolean     NOT NULL,
  topic        text        NOT NULL,
  payload      jsonb       NOT NULL,
  headers      jsonb       NOT NULL DEFAULT '{}',
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (lane, id)
) WITH (fillfactor = 100)`,
    `
CREATE TABLE ${s}.outbox_lanes (
  lane             smallint    PRIMARY KEY,
  cursor           bigint      NOT NULL DEFAULT 0,
  pruned_to        bigint      NOT NULL DEFAULT 0,
  owner            text,
  lease_expires_at timestamptz
) WITH (fillfactor = 20)`,
    `INSERT INTO ${s}.outbox_lanes (lane) SELECT g FROM generate_series(0, ${LANE_COUNT - 1}) g`,
    // Dispatchers alive, so that each takes its share of the lanes (src/lanes/lane-balance.ts).
    `
CREATE TABLE ${s}.outbox_lane_owners (
  owner      text        PRIMARY KEY,
  seen_until timestamptz NOT NULL
)`,
    // The states of a parked row:
    // - head = true, dead_at NULL: due at available_at (a failure's retry, or a message given back
    //   unsent); the parked path publishes it then.
    // - head = false: behind its aggregate's head (ordered), waiting for it to leave.
    // - dead_at set: dead-lettered. Under `hold` it stays head and blocks its aggregate; under
    //   `skip` it is no longer head nor blocking, and the next parked one of its aggregate is head.
    // `blocks`: an ordered row whose aggregate's later messages must park behind it.
    `
CREATE TABLE ${s}.outbox_lane_parked (
  lane          smallint    NOT NULL,
  id            bigint      NOT NULL,
  aggregate_id  text        NOT NULL,
  ordered       boolean     NOT NULL,
  head          boolean     NOT NULL,
  blocks        boolean     NOT NULL,
  attempts      integer     NOT NULL DEFAULT 0,
  last_error    text,
  available_at  timestamptz NOT NULL DEFAULT now(),
  parked_at     timestamptz NOT NULL DEFAULT now(),
  dead_at       timestamptz,
  PRIMARY KEY (lane, id)
)`,
    `CREATE INDEX outbox_lane_parked_blocks_idx ON ${s}.outbox_lane_parked (lane, aggregate_id, id) WHERE blocks`,
    `CREATE INDEX outbox_lane_parked_due_idx ON ${s}.outbox_lane_parked (lane, available_at) WHERE head AND dead_at IS NULL`,
    `CREATE INDEX outbox_lane_parked_dead_idx ON ${s}.outbox_lane_parked (dead_at) WHERE dead_at IS NOT NULL`,
    `
CREATE FUNCTION ${s}.outbox_lane_of(p_aggregate text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ((hashtext(p_aggregate) & 2147483647) % ${LANE_COUNT})::smallint
$$`,
    laneHorizonFunctionSql(s),
    lanePromoteFunctionSql(s),
    // Replaced by migration 025 (a published row is not parked again): the text 024 created.
    laneNextFunction024(s),
    laneBalanceFunctionSql(s),
    // Replaced by migration 025 (deferrals): the text 024 created, frozen.
    laneSettleParkedFunction024(s),
    lanePruneFunctionSql(s),
  ],
};
