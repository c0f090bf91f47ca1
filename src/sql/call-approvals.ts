/**
 * SQL of the tool-call approvals `outbox_call_approvals` (migration 022, issue 42). `s` is the
 * validated, quoted schema name. Every statement returns the same columns ({@link CALL_COLUMNS})
 * so one mapper reads them all.
 */

/** The columns every statement returns, camel-cased for the mapper. */
const CALL_COLUMNS = `id::text AS id, tool, call_id AS "callId", input, state,
  requested_by AS "requestedBy", requested_at AS "requestedAt", expires_at AS "expiresAt",
  decided_by AS "decidedBy", decided_at AS "decidedAt", reason, state_ref AS "stateRef",
  used_at AS "usedAt", used_key AS "usedKey", notified_at AS "notifiedAt",
  expires_at <= now() AS "pastExpiry"`;

/**
 * Asks for a person's decision on one call, or finds the request made before for it (a framework
 * may ask again on resume). An INSERT ... ON CONFLICT DO NOTHING with the existing row read
 * beside it, rather than an upsert: asking again must not touch the row (no dead tuple, no change
 * of its expiry or input). $1 tool, $2 call id, $3 input (jsonb text), $4 requested by, $5 expiry
 * in milliseconds, $6 state reference.
 */
export const requestCallApprovalSql = (s: string) => `
WITH inserted AS (
  INSERT INTO ${s}.outbox_call_approvals (tool, call_id, input, requested_by, expires_at, state_ref)
  VALUES ($1, $2, $3::jsonb, $4, now() + $5::float8 * interval '1 millisecond', $6)
  ON CONFLICT (tool, call_id) DO NOTHING
  RETURNING *
)
SELECT ${CALL_COLUMNS}, true AS created FROM inserted
UNION ALL
SELECT ${CALL_COLUMNS}, false AS created FROM ${s}.outbox_call_approvals
WHERE tool = $1 AND call_id = $2 AND NOT EXISTS (SELECT 1 FROM inserted)`;

/**
 * The approval of the call being executed, locked for the tool's transaction: the tool uses it
 * (once) or refuses, and a concurrent decision or second use waits for that transaction. `sameInput`:
 * whether the call runs with the arguments the person was asked about (jsonb equality: key order
 * and spacing do not matter). $1 tool, $2 call id, $3 the call's input (jsonb text).
 */
export const callApprovalForUpdateSql = (s: string) => `
SELECT ${CALL_COLUMNS}, input = $3::jsonb AS "sameInput"
FROM ${s}.outbox_call_approvals
WHERE tool = $1 AND call_id = $2
FOR UPDATE`;

/** Marks the approval used by the call that runs on it (in that call's transaction). $1 id, $2 key. */
export const useCallApprovalSql = (s: string) => `
UPDATE ${s}.outbox_call_approvals SET used_at = now(), used_key = $2
WHERE id = $1 AND used_at IS NULL AND state = 'approved'
RETURNING id`;

/**
 * Decides one call approval, once: only a row still awaiting and not past its expiry changes, so
 * two decisions cannot both win and a decision after the expiry is refused even before the sweep
 * ran. $1 id, $2 state (approved | rejected), $3 by, $4 reason, $5 delivered already (the
 * application resumes the run itself: the callback is not called).
 */
export const decideCallApprovalSql = (s: string) => `
UPDATE ${s}.outbox_call_approvals
SET state = $2, decided_by = $3, decided_at = now(), reason = $4,
    notified_at = CASE WHEN $5::boolean THEN now() END
WHERE id = $1 AND state = 'awaiting' AND expires_at > now()
RETURNING ${CALL_COLUMNS}`;

/** One approval by id, to say why a decision was refused. */
export const callApprovalByIdSql = (s: string) => `
SELECT ${CALL_COLUMNS} FROM ${s}.outbox_call_approvals WHERE id = $1`;

/** The approvals of these calls: $1 tools, $2 call ids (pairwise). */
export const callApprovalsOfCallsSql = (s: string) => `
SELECT ${CALL_COLUMNS}
FROM ${s}.outbox_call_approvals a
JOIN unnest($1::text[], $2::text[]) AS c(tool, call_id) USING (tool, call_id)`;

/**
 * Expires up to $1 undecided approvals past their expiry (oldest first, from
 * `outbox_call_approvals_awaiting_idx`); SKIP LOCKED: a row a decision or a tool holds is left to
 * the next sweep.
 */
export const expireCallApprovalsSql = (s: string) => `
UPDATE ${s}.outbox_call_approvals a
SET state = 'expired', decided_by = 'expiry', decided_at = now(),
    reason = 'no decision before it expired at ' || to_char(a.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')
WHERE a.id IN (
  SELECT id FROM ${s}.outbox_call_approvals
  WHERE state = 'awaiting' AND expires_at <= now()
  ORDER BY expires_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
RETURNING ${CALL_COLUMNS}`;

/**
 * Takes up to $1 decisions not yet delivered to the application's callback, marking them
 * delivered in the same statement (from `outbox_call_approvals_undelivered_idx`); SKIP LOCKED, so
 * two watchers never deliver one decision both. A callback that fails hands it back
 * ({@link undeliverCallApprovalSql}).
 */
export const takeUndeliveredSql = (s: string) => `
UPDATE ${s}.outbox_call_approvals
SET notified_at = now()
WHERE id IN (
  SELECT id FROM ${s}.outbox_call_approvals
  WHERE state <> 'awaiting' AND notified_at IS NULL
  ORDER BY decided_at
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
RETURNING ${CALL_COLUMNS}`;

/** Hands a decision back for the next delivery (its callback failed). $1 id. */
export const undeliverCallApprovalSql = (s: string) => `
UPDATE ${s}.outbox_call_approvals SET notified_at = NULL WHERE id = $1`;

/**
 * Call approvals for `outbox approvals` and the dashboard, oldest first: $1 state or NULL (all),
 * $2 limit. Awaiting ones come from `outbox_call_approvals_awaiting_idx`.
 */
export const listCallApprovalsSql = (s: string) => `
SELECT ${CALL_COLUMNS}
FROM ${s}.outbox_call_approvals
WHERE $1::text IS NULL OR state = $1
ORDER BY requested_at, id
LIMIT $2`;
