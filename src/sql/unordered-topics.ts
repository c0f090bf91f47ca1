/**
 * `outbox_unordered_topics` (migration 009): LIKE patterns of topics whose messages take no part
 * in their aggregate's order. The insert trigger reads it when a message does not say itself
 * (`ordered` NULL), so the decision is made once, when the message is written, and every
 * dispatcher agrees on it. Adding a pattern changes messages written from then on, not those
 * already pending.
 *
 * $1 LIKE patterns (text[]).
 */
export const addUnorderedTopicsSql = (schema: string) => `
INSERT INTO ${schema}.outbox_unordered_topics (pattern)
SELECT DISTINCT unnest($1::text[])
ON CONFLICT (pattern) DO NOTHING
RETURNING pattern`;

/** $1 LIKE patterns (text[]). */
export const removeUnorderedTopicsSql = (schema: string) => `
DELETE FROM ${schema}.outbox_unordered_topics WHERE pattern = ANY($1::text[]) RETURNING pattern`;

export const listUnorderedTopicsSql = (schema: string) => `
SELECT pattern, created_at AS "createdAt" FROM ${schema}.outbox_unordered_topics ORDER BY pattern`;
