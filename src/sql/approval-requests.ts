/**
 * The approval request of each held message (issue 20's optional notification): one message on
 * the topic the writer was given (`createOutbox({ approvalRequests })`), written right after the
 * held messages in the caller's transaction, so a request exists exactly when its held message
 * does. A router can send it to a chat webhook; the person then decides in the CLI, the dashboard
 * or through the API.
 *
 * Read back from the held rows themselves, so it says what the database decided (the expiry the
 * hold trigger set, the requester) — one statement for every held message of the call.
 *
 * - Unordered (`ordered = false`): a request must never wait behind the message it asks about,
 *   which is held at its aggregate's head.
 * - On an aggregate of its own (`approval:` + the held message's aggregate, cut to the 255
 *   characters an aggregate id may have): the held aggregate's sequences stay what its consumers
 *   expect, and the counter row taken is one per held aggregate, locked by this transaction only.
 * - The payload of the held message is included unless the writer says not to (`$3`): the person
 *   has to see what they approve. `jsonb_build_object` and `||`, not `jsonb_strip_nulls`, which
 *   would also strip the nulls inside that payload.
 * - Headers: the held message's trace context (the request joins its trace) and tenant.
 * - `onExpiry` says what the deadline does (migration 013); `approvalLink`, when the writer signs
 *   links (`$4`, held message id → URL, computed in JS: the HMAC secret never reaches SQL), is the
 *   link a person opens to decide (core/approval-links.ts).
 *
 * $1 ids of the held rows (bigint[]), $2 the requests' topic, $3 include the held payload,
 * $4 links (jsonb object) or NULL.
 */
export const insertApprovalRequestsSql = (schema: string) => `
INSERT INTO ${schema}.outbox (aggregate_id, topic, payload, headers, ordered)
SELECT left('approval:' || o.aggregate_id, 255),
       $2::text,
       jsonb_build_object(
         'messageId', o.message_id::text,
         'topic', o.topic,
         'aggregateId', o.aggregate_id,
         'sequence', o.sequence,
         'requestedBy', o.approval_requested_by,
         'expiresAt', o.approval_expires_at,
         'onExpiry', coalesce(o.approval_on_expiry, 'reject'))
         || CASE WHEN $3::boolean THEN jsonb_build_object('payload', o.payload) ELSE '{}' END
         || CASE WHEN $4::jsonb ? o.message_id::text
                 THEN jsonb_build_object('approvalLink', $4::jsonb -> o.message_id::text)
                 ELSE '{}' END,
       jsonb_strip_nulls(jsonb_build_object(
         'schema_version', '1',
         'traceparent', o.headers ->> 'traceparent',
         'tracestate', o.headers ->> 'tracestate',
         'tenant_id', o.headers ->> 'tenant_id')),
       false
FROM ${schema}.outbox o
WHERE o.id = ANY ($1::bigint[])
  AND o.approval_state = 'awaiting'
ORDER BY o.id
RETURNING message_id::text AS "messageId", payload ->> 'messageId' AS "heldMessageId"`;
