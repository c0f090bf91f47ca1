import type { Migration } from './migration.js';

/**
 * Human approval (issue 20): a message can be written HELD — never claimed until a person
 * approves it — and every decision is kept with the message.
 *
 * Columns (all NULL on a message that needs no approval, so existing rows and writers are
 * untouched; every ADD COLUMN is catalog-only):
 * - `approval_state`: `awaiting` → `approved` | `rejected` | `expired`. A writer sets `awaiting`
 *   (the writer's `requiresApproval: true`, or a plain INSERT naming the column); the other states
 *   are set by a decision (src/sql/approvals.ts) and never by an INSERT.
 * - `approval_expires_at`: when an undecided message expires (default: written + 7 days).
 * - `approval_requested_by`: who asked — the tool call (tool, idempotency key) or the caller's text.
 * - `approval_decided_by` / `approval_decided_at` / `approval_note`: the decision's audit trail
 *   (who, when, why: the note of an approval, the reason of a rejection; `expired` is decided by
 *   the dispatcher's sweep, `approval_decided_by = 'expiry'`).
 * - `approval_available_at`: the `available_at` the message was written with. While it waits,
 *   `available_at` is `infinity`; approving sets it back (or to now, whichever is later).
 *
 * Why `available_at = infinity` and not a condition in the claim: the claim (sql/claim.ts) reads
 * `outbox_ready_idx` from the oldest due row up to `now()`, and stops a run behind a head at the
 * first row that is not due. A held message is never due, so it is past the end of every claim's
 * index range — a held head costs a claim nothing, like a head backing off — and a run stops at it.
 * Its `ready` flag stays the chain's (the insert trigger and the settle keep it as for any
 * message), so approving a held head makes it claimable by changing `available_at` alone, and the
 * head check (a pending ordered predecessor blocks) still guarantees order. Nothing in claim.ts or
 * settle.ts changes. Rejected (tried first): `ready = false` while held, which the settle's
 * "mark the next one ready" would have to skip and an approval would have to recompute (the
 * writer race of settle.ts, a second time).
 *
 * Rejected and expired messages are dead-lettered (`dead_lettered_at`): kept, never published,
 * out of the backlog. They are not dead letters for replay, status or alerts (those queries
 * exclude them) — `replay` would publish what a person refused. Under the `hold` dead-letter
 * policy such a message stays in its chain (ordered, pending) and blocks its successors; under
 * `skip` it leaves the chain (`ordered = false`) and its successor is marked ready.
 *
 * Plain SQL writes a held message by naming one column (the trigger does the rest):
 *   INSERT INTO outbox (aggregate_id, topic, payload, approval_state)
 *   VALUES ('order:42', 'payment.refund', '{"amount": 50000}', 'awaiting');
 * `outbox_hold_before_insert` runs only for such rows (`WHEN`), so other inserts pay nothing.
 *
 * `outbox_awaiting_approval_idx` holds only undecided messages: the approvals list, the expiry
 * sweep and the metrics read it whole, and it is as small as what waits for a person.
 * `outbox_tool_calls.message_ids` links a tool call to the messages it wrote, for
 * `effectStatusTool` (looked up by idempotency key: `outbox_tool_calls_key_idx`).
 * `outbox_archive` gets the audit columns so `outbox prune --archive` keeps them.
 *
 * The CHECK is added NOT VALID: every existing row is NULL (which passes), and validating would
 * scan the whole table under an exclusive lock. New rows are checked all the same.
 */
export const approvals: Migration = {
  version: 10,
  name: 'approvals',
  up: (s) => [
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_state text`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_expires_at timestamptz`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_available_at timestamptz`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_requested_by text`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_decided_by text`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_decided_at timestamptz`,
    `ALTER TABLE ${s}.outbox ADD COLUMN approval_note text`,
    `
ALTER TABLE ${s}.outbox ADD CONSTRAINT outbox_approval_state
  CHECK (approval_state IN ('awaiting', 'approved', 'rejected', 'expired')) NOT VALID`,
    `
CREATE INDEX IF NOT EXISTS outbox_awaiting_approval_idx ON ${s}.outbox (approval_expires_at)
  WHERE approval_state = 'awaiting'`,
    `
CREATE FUNCTION ${s}.outbox_hold_before_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.approval_state <> 'awaiting' THEN
    RAISE EXCEPTION 'agent-outbox: a message is written with approval_state ''awaiting'' (held) or NULL, not ''%''; approve or reject it afterwards', NEW.approval_state
      USING ERRCODE = 'check_violation';
  END IF;
  NEW.approval_expires_at := coalesce(NEW.approval_expires_at, NEW.created_at + interval '7 days');
  -- Held: never due until approved (see the migration's comment); the time it asked for is kept.
  NEW.approval_available_at := NEW.available_at;
  NEW.available_at := 'infinity';
  NEW.approval_decided_by := NULL;
  NEW.approval_decided_at := NULL;
  NEW.approval_note := NULL;
  RETURN NEW;
END
$$`,
    `
CREATE TRIGGER outbox_hold_before_insert BEFORE INSERT ON ${s}.outbox
  FOR EACH ROW WHEN (NEW.approval_state IS NOT NULL)
  EXECUTE FUNCTION ${s}.outbox_hold_before_insert()`,
    `ALTER TABLE ${s}.outbox_tool_calls ADD COLUMN message_ids uuid[]`,
    `
CREATE INDEX IF NOT EXISTS outbox_tool_calls_key_idx ON ${s}.outbox_tool_calls (idempotency_key)`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_state text`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_requested_by text`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_decided_by text`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_decided_at timestamptz`,
    `ALTER TABLE ${s}.outbox_archive ADD COLUMN approval_note text`,
  ],
};
