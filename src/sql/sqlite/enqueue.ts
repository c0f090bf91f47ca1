/**
 * The two statements the writer adds to the caller's transaction for each message: to a D1
 * `batch()`, or run on the SQLite store's caller's open transaction (better-sqlite3).
 *
 * Why this assigns commit-ordered sequences without row locks: a D1 `batch()` runs its
 * statements in one transaction (as does a better-sqlite3 transaction), and SQLite runs write
 * transactions one at a time, across processes too. The counter
 * bump and the insert that reads it back are in the same transaction as the caller's business
 * rows, so no other batch can interleave between them: the sequence a message gets is the order
 * in which batches touching its aggregate commit — the same guarantee the Postgres trigger gets
 * from its row lock on `outbox_aggregates`. A rolled-back batch rolls the counter back too, so
 * sequences have no holes from failed writes.
 *
 * Tried and rejected: `MAX(sequence) + 1` over `outbox` (breaks once dispatched rows are pruned,
 * and the pruned aggregate would restart at 1, which consumers would see as stale) and computing
 * the sequence in the Worker before the batch (two Workers read the same value and race).
 */

/** ?1 aggregate id. Creates the aggregate's counter at 1 or increments it. */
export const bumpSequenceSql = `
INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
VALUES (?1, 1)
ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = last_sequence + 1`;

/**
 * ?1 message id, ?2 aggregate id, ?3 topic, ?4 payload JSON, ?5 headers JSON, ?6 created_at ms,
 * ?7 available_at ms, ?8 the message's `ordered` (1, 0, or NULL: decide from
 * `outbox_unordered_topics`). The sequence is read from the counter bumped by the previous
 * statement.
 *
 * `ordered` and `ready` are decided here, once (migration 2). `ready`: unordered messages are
 * always ready; an ordered one is its aggregate's head, and ready, when no ordered message of the
 * aggregate is pending (dead ones under `hold` included: they still block). That probe is one
 * seek into `outbox_chain_idx`, and it is exact: this statement runs inside the caller's batch,
 * and SQLite runs one write transaction at a time, so no settle can be between "is anything
 * pending?" and this row becoming visible — a settle either ran before (and the probe sees its
 * result) or runs after (and sees this row as the next head). Postgres needs a lock and a
 * deferral for the same decision (src/sql/settle.ts). Sequence 1 needs no probe.
 *
 * RETURNING gives the SQLite writer the row id and sequence it reports; a D1 batch ignores it.
 *
 * Patterns are matched with GLOB, not LIKE: SQLite's LIKE ignores ASCII case, Postgres's does
 * not, and topic patterns must match the same topics on both.
 */
export const insertMessageSql = `
INSERT INTO outbox (message_id, aggregate_id, topic, payload, headers, sequence, created_at,
                    available_at, ordered, ready)
SELECT ?1, ?2, ?3, ?4, ?5, a.last_sequence, ?6, ?7, d.ordered,
       CASE
         WHEN d.ordered = 0 OR a.last_sequence = 1 THEN 1
         WHEN EXISTS (
           SELECT 1 FROM outbox p
            WHERE p.aggregate_id = ?2 AND p.dispatched_at IS NULL AND p.ordered = 1
         ) THEN 0
         ELSE 1
       END
  FROM outbox_aggregates a,
       (SELECT coalesce(?8, NOT EXISTS (
          SELECT 1 FROM outbox_unordered_topics u WHERE ?3 GLOB u.pattern
        )) AS ordered) d
 WHERE a.aggregate_id = ?2
RETURNING id, sequence`;
