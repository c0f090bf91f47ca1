/**
 * Statements that keep the SQLite (and D1) outbox's chains (migration 2) in shape outside the claim → settle
 * cycle: the unordered-topic patterns the writer reads, and the head repair.
 */

/**
 * `outbox_unordered_topics`: SQLite GLOB patterns of topics whose messages take no part in their
 * aggregate's order. The writer's INSERT reads it when a message does not say itself, so the
 * decision is made once, when the message is written, and every dispatcher agrees on it. Adding a
 * pattern changes messages written from then on, not those already pending.
 * ?1 JSON array of GLOB patterns, ?2 now (ms).
 */
export const addUnorderedTopicsSql = `
INSERT INTO outbox_unordered_topics (pattern, created_at)
SELECT DISTINCT value, ?2 FROM json_each(?1) WHERE true
ON CONFLICT (pattern) DO NOTHING
RETURNING pattern`;

/** ?1 JSON array of GLOB patterns. */
export const removeUnorderedTopicsSql = `
DELETE FROM outbox_unordered_topics WHERE pattern IN (SELECT value FROM json_each(?1))
RETURNING pattern`;

export const listUnorderedTopicsSql = `
SELECT pattern FROM outbox_unordered_topics ORDER BY pattern`;

/**
 * Takes the head-repair slot when the last repair is older than ?2 ms: returns a row only then
 * (an upsert whose DO UPDATE is skipped returns nothing). ?1 now (ms), ?2 interval (ms).
 */
export const takeRepairSlotSql = `
INSERT INTO outbox_maintenance (task, last_run_at) VALUES ('repair-heads', ?1)
ON CONFLICT (task) DO UPDATE SET last_run_at = excluded.last_run_at
 WHERE outbox_maintenance.last_run_at <= ?1 - ?2
RETURNING last_run_at`;

/**
 * Marks ready the first pending ordered message (the head) of each aggregate `aggregates` (a
 * SELECT of one `aggregate_id` column) yields: one seek into `outbox_chain_idx` per aggregate.
 * Shared by the head repair below and the settle (settle.ts `markNextReadySql`).
 */
export const markHeadsReadySql = (aggregates: string) => `UPDATE outbox
   SET ready = 1
 WHERE ready = 0
   AND id IN (
     SELECT (SELECT p.id
               FROM outbox p
              WHERE p.aggregate_id = a.aggregate_id
                AND p.dispatched_at IS NULL
                AND p.ordered = 1
              ORDER BY p.sequence
              LIMIT 1)
       FROM (${aggregates}) a
   )`;

/**
 * Marks each aggregate's first pending ordered message ready. Nothing in this version leaves a head
 * unmarked (the writer and the settle decide exactly); but a Worker of a version before migration
 * 2 that keeps running after the migration was applied (the minutes between
 * `wrangler d1 migrations apply` and `wrangler deploy`, or a gradual deployment) settles heads
 * without marking their successors, and those would never be claimed. Marking a true head ready is
 * always safe (the claim's head check is the guarantee), so it can race with anything.
 *
 * A loose index scan over `outbox_chain_idx` (a recursive CTE hopping from one aggregate to the
 * next with `min(aggregate_id) ... > previous`): one seek per aggregate with pending ordered
 * messages, never the rows behind its head, never idle aggregates.
 */
export const repairHeadsSql = `
WITH RECURSIVE aggregates (aggregate_id) AS (
  SELECT (SELECT min(p.aggregate_id) FROM outbox p WHERE p.dispatched_at IS NULL AND p.ordered = 1)
  UNION ALL
  SELECT (SELECT min(p.aggregate_id)
            FROM outbox p
           WHERE p.dispatched_at IS NULL AND p.ordered = 1 AND p.aggregate_id > a.aggregate_id)
    FROM aggregates a
   WHERE a.aggregate_id IS NOT NULL
)
${markHeadsReadySql(`SELECT a.aggregate_id FROM aggregates a WHERE a.aggregate_id IS NOT NULL`)}
RETURNING id`;
