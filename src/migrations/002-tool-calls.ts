import type { Migration } from './migration.js';

/**
 * Idempotency keys of agent tool calls (agent-outbox/agent). A tool call inserts its
 * (tool, idempotency_key) row in the SAME transaction as its business rows and outbox messages, so:
 *
 * - a committed key means the call's effects are committed: a repeated key is answered "deduped"
 *   and writes nothing;
 * - a rolled-back call leaves no key behind and can be retried with the same key;
 * - a concurrent duplicate's `INSERT ... ON CONFLICT DO NOTHING` waits on the first call's
 *   uncommitted row, then sees it committed (deduped) or gone (it proceeds) — never both run.
 *
 * `result` keeps the first call's answer so a duplicate can repeat it to the model. `created_at`
 * is indexed for pruning: keys only need to outlive the caller's retry window.
 */
export const toolCalls: Migration = {
  version: 2,
  name: 'tool-calls',
  up: (s) => [
    `
CREATE TABLE ${s}.outbox_tool_calls (
  tool            text        NOT NULL,
  idempotency_key text        NOT NULL,
  result          jsonb,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tool, idempotency_key)
)`,
    `
CREATE INDEX outbox_tool_calls_created_at_idx ON ${s}.outbox_tool_calls (created_at)`,
  ],
};
