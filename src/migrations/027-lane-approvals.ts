import {
  laneApplyDecisionsFunctionSql,
  laneDecideFunctionSql,
  laneExpireFunctionSql,
} from '../sql/lane-approvals.js';
import { laneNextFunctionSql } from '../sql/lanes.js';
import type { Migration } from './migration.js';

/**
 * Held messages (`requiresApproval`) on the lanes engine (issue 43: the claim engine's features
 * move onto lanes), with the claim engine's semantics (migration 010, docs/approvals.md).
 *
 * - `outbox_lane_approvals`: one row per held message, written by the lanes writer in the same
 *   statement sequence as the message: its state (`awaiting` → `approved` | `rejected` |
 *   `expired`), who asked, its expiry, the time it was written for (`available_at`, NULL for at
 *   once), what the expiry does (`on_expiry`), and the decision's audit trail (who, when, note;
 *   `dead_blocks`: the dead-letter policy a rejection or expiry was decided under). Keyed by the
 *   message's id (one sequence numbers every lane), its message id unique: a decision finds it
 *   by either. `outbox_lane_messages` gets no column, no index and no trigger: the hot row is
 *   as it was.
 * - The held message itself is written with `available_at = infinity` (migration 026's column):
 *   the lane read takes it for a delayed message that is never due and parks it, an ordered one
 *   holding its aggregate's later messages behind it (G4). Messages that are not held take the
 *   path they took before, unchanged.
 * - `outbox_lane_approvals_awaiting_idx`: only what waits (the list, the expiry sweep, the
 *   gauges read it whole; it is as small as what waits for a person).
 * - `outbox_lane_next` probes a held message's decision when it reads one, and reads a lane row
 *   by row under a shared try of the lane's decision lock (sql/lanes.ts, item 6); migration
 *   026's text is frozen in 026-frozen-functions.ts. Same signature and result: replaced in
 *   place.
 * - `outbox_lane_decide`, `outbox_lane_expire_approvals` and `outbox_lane_apply_decisions`:
 *   the decisions (sql/lane-approvals.ts).
 *
 * Plain SQL can write a held lane message only by writing both rows (the message with
 * `available_at = 'infinity'` and its decision row); a message written with infinity and no
 * decision row waits for good.
 */
export const laneApprovals: Migration = {
  version: 27,
  name: 'lane-approvals',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_lane_approvals (
  id           bigint      PRIMARY KEY,
  lane         smallint    NOT NULL,
  message_id   uuid        NOT NULL UNIQUE,
  state        text        NOT NULL DEFAULT 'awaiting'
               CHECK (state IN ('awaiting', 'approved', 'rejected', 'expired')),
  requested_by text,
  requested_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  available_at timestamptz,
  on_expiry    text        NOT NULL DEFAULT 'reject' CHECK (on_expiry IN ('reject', 'approve')),
  decided_by   text,
  decided_at   timestamptz,
  note         text,
  dead_blocks  boolean
)`,
    `CREATE INDEX outbox_lane_approvals_awaiting_idx ON ${s}.outbox_lane_approvals (expires_at) WHERE state = 'awaiting'`,
    laneApplyDecisionsFunctionSql(s),
    laneDecideFunctionSql(s),
    laneExpireFunctionSql(s),
    laneNextFunctionSql(s),
  ],
};
