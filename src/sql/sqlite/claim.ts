/**
 * The ready heads a claim may take, oldest due first (step 1 of {@link claimSql}): the FROM,
 * WHERE, ORDER BY and LIMIT after a SELECT list of `o` columns.
 */
const headsFrom = `
    FROM outbox o
   WHERE o.ready = 1
     AND o.dispatched_at IS NULL
     AND o.dead_lettered_at IS NULL
     AND o.available_at <= ?2
     AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ?2)
     AND (
       o.ordered = 0
       OR NOT EXISTS (
         SELECT 1
           FROM outbox p
          WHERE p.aggregate_id = o.aggregate_id
            AND p.sequence < o.sequence
            AND p.dispatched_at IS NULL
            AND p.ordered = 1
       )
     )
   ORDER BY o.available_at, o.id
   LIMIT ?4`;

/** Step 3 of {@link claimSql}: leases the rows `ids` selects and returns what a publisher needs. */
const leaseWhereIdIn = (ids: string) => `UPDATE outbox
   SET lease_owner = ?1,
       lease_expires_at = ?2 + ?3,
       attempts = attempts + 1
 WHERE id IN (${ids})
   AND dispatched_at IS NULL
   AND dead_lettered_at IS NULL
   AND (lease_expires_at IS NULL OR lease_expires_at <= ?2)
RETURNING id AS rowId, message_id AS id, topic, aggregate_id AS aggregateId, sequence, ordered,
          payload, headers, created_at AS createdAt, attempts, available_at AS availableAt`;

/**
 * The SQLite dialect, shared by D1 (src/cloudflare) and the SQLite store (src/stores/sqlite/): one
 * text per statement, bound with numbered parameters (`?1`), which both D1's `bind(...)` and
 * better-sqlite3 (as an object keyed 1, 2, ...) accept.
 *
 * Claims due messages with a lease, in ONE statement. D1 is SQLite: there is no
 * `FOR UPDATE SKIP LOCKED`, and none is needed — SQLite executes one write statement at a time
 * for the whole database, so between the CTEs that pick the rows and the UPDATE that leases them
 * no other claim can run. Two overlapping runs (a Cron and a Durable Object, or two Workers, or two
 * dispatcher processes on one SQLite file)
 * therefore get disjoint rows: the second one's CTEs already see the first one's lease. The
 * repeated lease condition on the outer UPDATE is belt and braces for that argument.
 *
 * What it reads (issue 16) — the rows read follow the batch, not the backlog:
 *
 * 1. `heads`: up to ?4 READY rows (migration 2: unordered messages and aggregates' heads) that are
 *    due and not leased, oldest due first, from `outbox_ready_idx`. Rows queued behind a head are
 *    not in that index; neither are heads backing off (`available_at` past the scanned range) nor
 *    dead letters. Only heads under a live lease are read and skipped, at most as many as messages
 *    in flight. Each ordered head is checked once more (`NOT EXISTS` on `outbox_chain_idx`: one
 *    seek): the writer and the settle keep `ready` exact on D1, so this check normally finds
 *    nothing, but it is what guarantees order (G4) if a row is ready without being the head (a
 *    row written by an older writer, whose `ready` defaulted to 1; a settle fenced halfway).
 * 2. `run`: behind each ordered head, its next messages in sequence order — consecutive, stopping
 *    at the first one that is not due, is leased or is dead — so one claim can take up to a batch
 *    of one hot aggregate (the dispatcher sends a run in order and stops at its first failure).
 *    The batch left after the heads is shared evenly between the runs (integer division: a
 *    fractional share would let each run take one more and the claim overrun its batch — the
 *    Durable Object restart test caught 12 claimed for a batch of 10). A recursive CTE walks each
 *    chain one step at a time (a seek for "the next pending ordered sequence", then the row by
 *    id), so a run reads about two rows per message it takes, never the rest of the chain.
 * 3. The UPDATE leases heads and runs and counts an attempt on each.
 *
 * Measured with D1's `meta.rows_read` on Miniflare (test/cloudflare/ordered-chains.test.ts prints
 * the figures), batch 200: 200 heads cost 2,401 rows read — the same 2,401 with 20,000 messages
 * behind a dead head and 20,000 behind a backing-off one; a run of 200 on an aggregate 20,001 deep
 * costs 2,006. The claim before this one read 1,400 for the 200 heads alone, 41,398 next to the
 * dead head's 20,000, 81,400 next to both, and 40,007 to take ONE message of the deep aggregate.
 * For scale: a bare `UPDATE ... WHERE id IN (200 ids)` reads 1,200 (index upkeep counts), so
 * about 12 per message claimed is twice that floor; with no backlog at all this claim reads more
 * than the old one, the price of the head check and the runs.
 *
 * Tried and rejected:
 * - The previous claim (every pending row by due time, a head check per candidate): every claim
 *   read every pending row behind a blocked head, billed per row on D1.
 * - A window function (`row_number() OVER (PARTITION BY aggregate_id ...)`) for the runs: SQLite
 *   has no LATERAL, so the window sees the whole chain of each aggregate before it is cut.
 * - Dropping the head check because D1's `ready` is exact: one seek per head buys order even when
 *   `ready` is not (see 1.).
 * - SELECT the ids, then UPDATE them in a second call: two runs read the same ids between the
 *   calls and both send them (the overlapping-runs test catches exactly this).
 *
 * Attempts are counted at claim, so a message that kills the Worker mid-send still runs out of
 * attempts; messages of a run that are never tried (the run stopped earlier) are released with
 * their attempt given back (settle.ts).
 *
 * ?1 lease owner token (unique per claim: the fencing token), ?2 now (ms), ?3 lease (ms),
 * ?4 batch size. The partial indexes' conditions (`ready = 1`, `ordered = 1`) are literals on
 * purpose: SQLite uses a partial index only when the query repeats its WHERE terms.
 */
export const claimSql = `
WITH RECURSIVE
heads AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered${headsFrom}
),
share AS MATERIALIZED (
  SELECT CAST((?4 - count(*)) / max(coalesce(sum(ordered), 0), 1) AS INTEGER) AS per_run
    FROM heads
),
run (id, aggregate_id, sequence, depth) AS (
  SELECT id, aggregate_id, sequence, 0 FROM heads WHERE ordered = 1
  UNION ALL
  SELECT n.id, n.aggregate_id, n.sequence, r.depth + 1
    FROM run r, share s, outbox n
   WHERE r.depth < s.per_run
     AND n.id = (
       SELECT p.id
         FROM outbox p
        WHERE p.aggregate_id = r.aggregate_id
          AND p.sequence > r.sequence
          AND p.dispatched_at IS NULL
          AND p.ordered = 1
        ORDER BY p.sequence
        LIMIT 1
     )
     AND n.available_at <= ?2
     AND n.dead_lettered_at IS NULL
     AND (n.lease_expires_at IS NULL OR n.lease_expires_at <= ?2)
)
${leaseWhereIdIn('SELECT id FROM heads UNION ALL SELECT id FROM run WHERE depth > 0')}`;

/**
 * {@link claimSql} without the runs: the same heads, leased by one plain UPDATE over the
 * subquery that picks them. The SQLite store uses it while its claims find no ordered message
 * (a backlog of unordered topics) and goes back to {@link claimSql} as soon as one does, so a
 * hot aggregate loses at most one claim's run. It is claimSql for a batch with no ordered head:
 * the same rows, in the same order, with the same head check for any ordered head it meets —
 * what it leaves out is only the work of the runs (materialising the heads, the recursive CTE,
 * the batch's share), about a fifth of the claim's CPU on a batch of 200 unordered messages
 * (bench/cases/sqlite.ts; 58 against 72 ms of statement CPU per 20,000 messages). Same
 * parameters and columns as claimSql.
 */
export const claimHeadsSql = `
${leaseWhereIdIn(`SELECT o.id${headsFrom}`)}`;

/** Turns a topic glob (`mail.*`) into a SQLite GLOB pattern that matches the same topics. */
export function globToSqliteGlob(glob: string): string {
  // In GLOB, `?` and `[` are wildcards; a bracket class makes each literal. `*` keeps its meaning.
  return glob.replace(/[?[]/g, (c) => `[${c}]`);
}

/** Inverse of {@link globToSqliteGlob} for the patterns it produces. */
export function sqliteGlobToGlob(pattern: string): string {
  return pattern.replace(/\[([?[])\]/g, '$1');
}

/**
 * When the next ready message becomes due after ?1 (a delayed message, a retry backing off), or
 * NULL: one seek into `outbox_ready_idx`. The Durable Object sets its alarm by it, with ?1 = the
 * time its last run started: a message that became due while that run was claiming is then
 * found (its time has passed: the alarm fires at once), and a ready row that is due but not
 * claimable (leased, or not its aggregate's head) is not — that would wake the object in a loop.
 */
export const nextDueSql = `
SELECT min(available_at) AS dueAt
  FROM outbox
 WHERE ready = 1
   AND dispatched_at IS NULL
   AND dead_lettered_at IS NULL
   AND available_at > ?1`;
