/**
 * The two statements the D1 writer adds to the caller's batch for each message.
 *
 * Why this assigns commit-ordered sequences without row locks: a D1 `batch()` runs its
 * statements in one transaction, and SQLite runs write transactions one at a time. The counter
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
 * ?7 available_at ms. The sequence is read from the counter bumped by the previous statement.
 */
export const insertMessageSql = `
INSERT INTO outbox (message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at)
SELECT ?1, ?2, ?3, ?4, ?5, a.last_sequence, ?6, ?7
  FROM outbox_aggregates a
 WHERE a.aggregate_id = ?2`;
