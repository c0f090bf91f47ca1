/**
 * The queue consumer's D1 statements. D1 has no interactive transactions: the only atomic unit
 * is a `batch()`, and a batch cannot branch on what an earlier statement found. So the consumer
 * READS first (ledger, position), runs the handler, and then writes the ledger row, the new
 * position and the handler's own statements in ONE batch whose first statements FAIL — rolling
 * the whole batch back, effect included — if a concurrent delivery got there first. Failing is
 * the only "if" a batch has.
 */

/** ?1 consumer, ?2 message id. */
export const ledgerStateSql = `
SELECT state FROM processed_messages WHERE consumer = ?1 AND message_id = ?2`;

/**
 * ?1 consumer, ?2 message id, ?3 now (ms). A plain INSERT on purpose (no OR IGNORE / ON
 * CONFLICT): when a concurrent delivery of the same message committed first, the primary key
 * violation aborts this batch, so the effect statements in it never commit twice.
 */
export const recordDoneSql = `
INSERT INTO processed_messages (consumer, message_id, state, processed_at)
VALUES (?1, ?2, 'done', ?3)`;

/** ?1 consumer, ?2 aggregate id. No row means 0. */
export const readPositionSql = `
SELECT last_sequence FROM consumer_positions WHERE consumer = ?1 AND aggregate_id = ?2`;

/**
 * Moves the position from the value read before the handler ran (?4) to ?3 — fenced: if another
 * delivery moved it meanwhile, the CASE writes -1, which `CHECK (last_sequence >= 0)` rejects,
 * aborting the batch. (SQLite's RAISE() only works inside triggers; a CHECK works anywhere.)
 * The inserted value is always ?3: SQLite checks CHECK constraints on the VALUES row before it
 * looks for a conflict, so a -1 there would fail every update. With no row read (?4 = 0), a row
 * inserted meanwhile by another delivery conflicts, and the CASE fences it.
 * ?1 consumer, ?2 aggregate id, ?3 new sequence, ?4 expected current sequence, ?5 now (ms).
 */
export const advancePositionSql = `
INSERT INTO consumer_positions (consumer, aggregate_id, last_sequence, updated_at)
VALUES (?1, ?2, ?3, ?5)
ON CONFLICT (consumer, aggregate_id) DO UPDATE
   SET last_sequence = CASE WHEN last_sequence = ?4 THEN excluded.last_sequence ELSE -1 END,
       updated_at = excluded.updated_at`;

/**
 * A delivery the consumer gave up on. ?1 consumer, ?2 queue message id, ?3 message id (null when
 * the body could not be parsed), ?4 reason, ?5 error, ?6 body text, ?7 now (ms).
 */
export const insertDeadLetterSql = `
INSERT INTO consumer_dead_letters
       (consumer, queue_message_id, message_id, reason, error, body, dead_lettered_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)`;
