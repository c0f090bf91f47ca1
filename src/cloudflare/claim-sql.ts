/**
 * Claims due messages with a lease, in ONE statement. D1 is SQLite: there is no
 * `FOR UPDATE SKIP LOCKED`, and none is needed — SQLite executes one write statement at a time
 * for the whole database, so between the sub-select that picks the rows and the UPDATE that
 * leases them no other claim can run. Two overlapping `scheduled()` runs (or two Workers)
 * therefore get disjoint rows: the second one's sub-select already sees the first one's lease.
 * The repeated lease condition on the outer UPDATE is belt and braces for that argument.
 *
 * Tried and rejected: SELECT the ids, then UPDATE them in a second call (two runs read the same
 * ids between the calls and both send them — the overlapping-runs test catches exactly this);
 * an `outbox_lease` table with one row per shard and `id % N` sharding (a second moving part
 * with the same atomicity argument, and a stuck shard blocks its ids).
 *
 * Eligibility mirrors the Postgres claim (src/sql/claim.ts): undispatched, not dead-lettered,
 * due, not under a live lease; on ordered topics only the aggregate's head (no undispatched
 * ordered predecessor by `sequence`, dead letters counting with the `hold` policy). Attempts are
 * counted at claim, so a message that kills the Worker mid-send still runs out of attempts.
 *
 * ?1 lease owner token (unique per claim: the fencing token), ?2 now (ms), ?3 lease (ms),
 * ?4 batch size, ?5 JSON array of SQLite GLOB patterns of unordered topics, ?6 1 when dead
 * letters block their aggregate (policy `hold`), else 0.
 *
 * GLOB, not LIKE: SQLite's LIKE ignores ASCII case, Postgres's does not, and topic patterns
 * must match the same topics on both.
 */
export const claimSql = `
UPDATE outbox
   SET lease_owner = ?1,
       lease_expires_at = ?2 + ?3,
       attempts = attempts + 1
 WHERE id IN (
   SELECT o.id
     FROM outbox o
    WHERE o.dispatched_at IS NULL
      AND o.dead_lettered_at IS NULL
      AND o.available_at <= ?2
      AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ?2)
      AND (
        EXISTS (SELECT 1 FROM json_each(?5) u WHERE o.topic GLOB u.value)
        OR NOT EXISTS (
          SELECT 1
            FROM outbox p
           WHERE p.aggregate_id = o.aggregate_id
             AND p.sequence < o.sequence
             AND p.dispatched_at IS NULL
             AND NOT EXISTS (SELECT 1 FROM json_each(?5) u WHERE p.topic GLOB u.value)
             AND (p.dead_lettered_at IS NULL OR ?6 = 1)
        )
      )
    ORDER BY o.available_at, o.id
    LIMIT ?4
 )
   AND (lease_expires_at IS NULL OR lease_expires_at <= ?2)
RETURNING id AS rowId, message_id AS id, topic, aggregate_id AS aggregateId, sequence,
          payload, headers, created_at AS createdAt, attempts, available_at AS availableAt`;

/** Turns a topic glob (`mail.*`) into a SQLite GLOB pattern that matches the same topics. */
export function globToSqliteGlob(glob: string): string {
  // In GLOB, `?` and `[` are wildcards; a bracket class makes each literal. `*` keeps its meaning.
  return glob.replace(/[?[]/g, (c) => `[${c}]`);
}
