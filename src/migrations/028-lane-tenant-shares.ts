import { laneSharesFunctionSql } from '../sql/lane-tenant-shares.js';
import { laneNextFunction028 } from './028-frozen-functions.js';
import type { Migration } from './migration.js';

/**
 * Fair shares between tenants on the lanes engine (issue 43: the claim engine's features move
 * onto lanes; sql/lane-tenant-shares.ts holds the design and its measurements).
 *
 * - `outbox_lane_messages_tenant_idx` (lane, tenant, id) and
 *   `outbox_lane_messages_tenant_seq_idx` (lane, aggregate, sequence): partial, on the rows that
 *   carry a `tenant_id` header only, so a message without a tenant costs its insert nothing
 *   more. The first finds a lane's tenants and each one's next messages, the second a tenanted
 *   message's predecessor (G4). An expression index, as migration 016's: a plain INSERT that
 *   sets the header counts the same.
 * - `outbox_lane_ahead`: what a share published (or parked) ahead of its lane's cursor, one row
 *   a message, written by the next `outbox_lane_next` call with the batch's outcome and deleted
 *   by the cursor move that passes it. Primary key (lane, id) for the lane reads that skip it;
 *   (lane, tenant, id) for where a tenant's next share starts.
 * - `outbox_lane_shares`: the shares of a full batch.
 * - `outbox_lane_next` takes three more parameters (what was published ahead, the tenant cursor
 *   of each lane) and skips what was published ahead: a new function beside migration 027's
 *   (frozen in 027-frozen-functions.ts), which becomes a call of it with no shares, so that a
 *   dispatcher of the previous version keeps working during a rolling upgrade (it skips what
 *   was published ahead; it publishes no shares).
 *
 * The CREATE INDEXes read `outbox_lane_messages` once, holding off lanes writers meanwhile (as
 * migration 026's).
 */
export const laneTenantShares: Migration = {
  version: 28,
  name: 'lane-tenant-shares',
  up: (s) => [
    `
CREATE INDEX outbox_lane_messages_tenant_idx ON ${s}.outbox_lane_messages
  (lane, (headers ->> 'tenant_id'), id) WHERE (headers ->> 'tenant_id') IS NOT NULL`,
    `
CREATE INDEX outbox_lane_messages_tenant_seq_idx ON ${s}.outbox_lane_messages
  (lane, aggregate_id, sequence) WHERE (headers ->> 'tenant_id') IS NOT NULL`,
    `
CREATE TABLE ${s}.outbox_lane_ahead (
  lane   smallint NOT NULL,
  id     bigint   NOT NULL,
  tenant text     NOT NULL,
  PRIMARY KEY (lane, id)
)`,
    `CREATE INDEX outbox_lane_ahead_tenant_idx ON ${s}.outbox_lane_ahead (lane, tenant, id)`,
    laneSharesFunctionSql(s),
    // Replaced by migration 031: the text 028 created, frozen.
    laneNextFunction028(s),
    `
DROP FUNCTION ${s}.outbox_lane_next(text, smallint[], bigint[], bigint[], smallint[], bigint[],
  text[], text[], float8[], boolean, integer, smallint, integer, bigint, bigint, bigint, boolean,
  smallint[], bigint[])`,
    `
CREATE FUNCTION ${s}.outbox_lane_next(
  p_owner text, p_lanes smallint[], p_from bigint[], p_to bigint[],
  p_park_lanes smallint[], p_park_ids bigint[], p_park_kinds text[], p_park_errors text[],
  p_park_delay_ms float8[], p_dead_blocks boolean,
  p_batch integer, p_start smallint, p_lease_ms integer,
  p_safe bigint, p_pair_id bigint, p_pair_xid bigint, p_async boolean,
  p_read_lanes smallint[], p_read_after bigint[])
RETURNS TABLE (lane smallint, id bigint, message_id uuid, aggregate_id text, sequence bigint,
               ordered boolean, topic text, payload jsonb, headers jsonb, created_ms float8,
               shadow boolean)
LANGUAGE sql SET jit = off AS $$
  -- A dispatcher of version 27: no shares; what others published ahead is skipped.
  SELECT * FROM ${s}.outbox_lane_next(p_owner, p_lanes, p_from, p_to, p_park_lanes, p_park_ids,
    p_park_kinds, p_park_errors, p_park_delay_ms, p_dead_blocks, p_batch, p_start, p_lease_ms,
    p_safe, p_pair_id, p_pair_xid, p_async, p_read_lanes, p_read_after, '{}', '{}', NULL)
$$`,
  ],
};
