/**
 * Inserts a whole batch in ONE statement. The batch travels as a single jsonb parameter and is
 * expanded with jsonb_array_elements:
 * - one round trip and one statement for 1 or 500 messages;
 * - one parameter works the same through pg, PGlite, postgres.js, Prisma's raw queries and Kysely
 *   — array parameters (`unnest($1::text[], ...)`) depend on each driver's array encoding, which
 *   is where jsonb[] escaping bugs live; a multi-VALUES list hits the 65535-parameter limit.
 *
 * Rows are inserted in array order, and the writer sends the array sorted by aggregate (code-unit
 * order, stable): the BEFORE INSERT trigger locks each aggregate's sequence counter, and taking
 * those locks in one global order means two batches touching the same aggregates cannot deadlock
 * each other. Positions are kept within an aggregate, so sequences follow the caller's order.
 * The sort was `ORDER BY m.value->>'a', m.position` here until measured: sorting on the text key
 * (a collation-aware comparison) cost ~0.3 ms per statement, a quarter of a whole business
 * transaction (bench/ enqueue_overhead); ordering by the integer position costs nothing visible.
 *
 * `now()` is the transaction's start time: `delayMs` counts from there. `ordered` is NULL unless the
 * message says: the trigger then decides from `outbox_unordered_topics` (migration 009).
 * `approval_state` is `awaiting` for a held message and NULL otherwise (then so are the other
 * two, and `outbox_hold_before_insert` does not run: migration 010); a NULL expiry means the
 * default, 7 days.
 */
export const insertMessagesSql = (schema: string) => `
INSERT INTO ${schema}.outbox (aggregate_id, topic, payload, headers, available_at, shadow, ordered,
                             approval_state, approval_expires_at, approval_requested_by)
SELECT m.value->>'a',
       m.value->>'t',
       m.value->'p',
       m.value->'h',
       coalesce((m.value->>'at')::timestamptz,
                now() + (m.value->>'d')::float8 * interval '1 millisecond'),
       coalesce((m.value->>'s')::boolean, false),
       (m.value->>'o')::boolean,
       m.value->>'ap',
       now() + (m.value->>'ae')::float8 * interval '1 millisecond',
       m.value->>'ar'
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS m(value, position)
ORDER BY m.position
RETURNING id::text AS id,
          message_id::text AS "messageId",
          sequence::text AS sequence,
          topic,
          aggregate_id AS "aggregateId"`;

/**
 * The same INSERT for a batch in which at least one message has a `dedupeKey` or is held with
 * `approvalOnExpiry: 'approve'` (migration 013): three more columns, and the key in RETURNING so the writer can tell which keyed messages were
 * written — `outbox_admit_dedupe_before_insert` drops a duplicate row, so it returns no row at all.
 * A separate text rather than the two columns always: a batch without keys (almost every
 * batch) runs the statement above, unchanged, at its measured cost (bench/ enqueue_overhead).
 * `dedupe_expires_at` is the writer's window ($2, ms) from `now()`, the transaction's start, as
 * `delayMs` counts; NULL on a message without a key.
 */
export const insertKeyedMessagesSql = (schema: string) => `
INSERT INTO ${schema}.outbox (aggregate_id, topic, payload, headers, available_at, shadow, ordered,
                             approval_state, approval_expires_at, approval_requested_by,
                             dedupe_key, dedupe_expires_at, approval_on_expiry)
SELECT m.value->>'a',
       m.value->>'t',
       m.value->'p',
       m.value->'h',
       coalesce((m.value->>'at')::timestamptz,
                now() + (m.value->>'d')::float8 * interval '1 millisecond'),
       coalesce((m.value->>'s')::boolean, false),
       (m.value->>'o')::boolean,
       m.value->>'ap',
       now() + (m.value->>'ae')::float8 * interval '1 millisecond',
       m.value->>'ar',
       m.value->>'k',
       CASE WHEN m.value ? 'k' THEN now() + $2::float8 * interval '1 millisecond' END,
       m.value->>'ax'
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS m(value, position)
ORDER BY m.position
RETURNING id::text AS id,
          message_id::text AS "messageId",
          sequence::text AS sequence,
          topic,
          aggregate_id AS "aggregateId",
          dedupe_key AS "dedupeKey"`;
