import { claimFunction011, settleAdvanceFunction011 } from './011-frozen-sql.js';
import type { Migration } from './migration.js';

/**
 * The dispatcher's claim and its settle of published messages as functions, `outbox_claim` and
 * `outbox_settle_advance` (sql/claim.ts, sql/settle.ts): their plans are made once per connection
 * instead of at every call. Planning was about half of each statement's cost and, since a
 * message's notify latency waits for a claim and the dispatcher waits for one settle before it
 * hands off the next batch, part of every message's latency. Each function pins its plan's shape
 * with `SET enable_…` so that a cached plan cannot become a scan of the whole outbox. Nothing else
 * changes: no table, no lock beyond the catalog's.
 *
 * Migration 012 re-creates both (the lane floor of issue 25); the text released here is frozen in
 * 011-frozen-sql.ts, which test/unit/sql/cached-plans.test.ts holds to its hash.
 */
export const cachedPlans: Migration = {
  version: 11,
  name: 'cached-plans',
  up: (schema) => [claimFunction011(schema), settleAdvanceFunction011(schema)],
};
