import type { Migration } from './migration.js';

/**
 * Approvals of agent tool CALLS (issue 42): a framework pauses a call before it runs (AI SDK and
 * OpenAI Agents `needsApproval`, LangGraph's interrupt, Claude's `canUseTool`), and the decision
 * is kept here, not in the framework's saved state — the outbox is the authority. One row per
 * call: `(tool, call_id)`, the framework's id of the call.
 *
 * - `input`: the arguments the person is asked about. A call runs unheld only with the SAME input
 *   (jsonb equality): a forged or edited history cannot reuse an approval for other arguments.
 * - `state`: `awaiting` → `approved` | `rejected` | `expired`, decided once (single-use:
 *   `used_at` is set by the one tool call that ran on it, in that call's transaction).
 * - `decided_by` / `decided_at` / `reason`: who, when, why (the note of an approval, the reason
 *   of a rejection; `expired` is decided by the sweep, `decided_by = 'expiry'`).
 * - `state_ref`: the application's reference of the framework's saved state (a thread id, a key
 *   under which it stored the `RunState` or the messages), handed back to its callback.
 * - `notified_at`: when the decision reached the application's callback (`watchCallApprovals`);
 *   NULL while it is still to be delivered. `outbox_call_approvals_undelivered_idx` holds only
 *   those, so the watcher's poll reads only what it must deliver.
 *
 * A new table and nothing else: no writer or dispatcher of an earlier version reads it.
 */
export const callApprovals: Migration = {
  version: 22,
  name: 'call-approvals',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_call_approvals (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tool         text        NOT NULL,
  call_id      text        NOT NULL,
  input        jsonb       NOT NULL,
  state        text        NOT NULL DEFAULT 'awaiting'
                           CHECK (state IN ('awaiting', 'approved', 'rejected', 'expired')),
  requested_by text,
  requested_at timestamptz NOT NULL DEFAULT now(),
  expires_at   timestamptz NOT NULL,
  decided_by   text,
  decided_at   timestamptz,
  reason       text,
  state_ref    text,
  used_at      timestamptz,
  used_key     text,
  notified_at  timestamptz,
  UNIQUE (tool, call_id)
)`,
    `
CREATE INDEX outbox_call_approvals_awaiting_idx ON ${s}.outbox_call_approvals (expires_at)
  WHERE state = 'awaiting'`,
    `
CREATE INDEX outbox_call_approvals_undelivered_idx ON ${s}.outbox_call_approvals (decided_at)
  WHERE state <> 'awaiting' AND notified_at IS NULL`,
  ],
};
