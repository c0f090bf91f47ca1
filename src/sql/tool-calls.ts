/**
 * SQL of the idempotency-key table `outbox_tool_calls` (migration 002). `s` is the validated,
 * quoted schema name.
 *
 * The claim is an `INSERT ... ON CONFLICT DO NOTHING` rather than a `SELECT` first: a SELECT
 * cannot see a concurrent call's uncommitted key and both calls would run; the INSERT waits on
 * that call's row lock, then either conflicts (the other committed: deduped) or inserts (the other
 * rolled back: this call runs).
 */
export const claimKeySql = (s: string) => `
INSERT INTO ${s}.outbox_tool_calls (tool, idempotency_key)
VALUES ($1, $2)
ON CONFLICT (tool, idempotency_key) DO NOTHING
RETURNING tool`;

/** The first call's stored answer, read after a conflicting claim. */
export const priorResultSql = (s: string) => `
SELECT result FROM ${s}.outbox_tool_calls WHERE tool = $1 AND idempotency_key = $2`;

/**
 * Stores the handler's result on the claimed row, and the ids of the messages the call wrote
 * (migration 010: `effectStatusTool` finds them by idempotency key). Being the last statement
 * before COMMIT it also catches a handler that swallowed an SQL error: Postgres refuses it in an
 * aborted transaction, where a bare COMMIT would silently roll back and the call would be reported
 * as done.
 */
export const saveResultSql = (s: string) => `
UPDATE ${s}.outbox_tool_calls SET result = $3::jsonb, message_ids = $4::uuid[]
WHERE tool = $1 AND idempotency_key = $2`;

/**
 * The message ids of the calls with this idempotency key (of one tool, or of any: the key is
 * usually unique to a request), newest first, from `outbox_tool_calls_key_idx`. $1 key, $2 tool
 * or NULL, $3 limit.
 */
export const messagesOfKeySql = (s: string) => `
SELECT tool, message_ids::text[] AS "messageIds"
FROM ${s}.outbox_tool_calls
WHERE idempotency_key = $1 AND ($2::text IS NULL OR tool = $2)
ORDER BY created_at DESC
LIMIT $3`;
