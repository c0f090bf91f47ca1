/**
 * Per-aggregate positions (`consumer_positions`, migration 003). `s` is the validated, quoted
 * schema name.
 */

/**
 * Makes sure the row exists so {@link lockPositionSql} has something to lock (FOR UPDATE on a
 * missing row locks nothing, and two first deliveries would then both pass the check).
 */
export const ensurePositionSql = (s: string) => `
INSERT INTO ${s}.consumer_positions (consumer, aggregate_id, last_sequence)
VALUES ($1, $2, 0)
ON CONFLICT (consumer, aggregate_id) DO NOTHING`;

/**
 * Locks the aggregate's position for the rest of the transaction: deliveries of the same
 * aggregate to the same consumer serialise here, other aggregates are not blocked.
 */
export const lockPositionSql = (s: string) => `
SELECT last_sequence::text AS last_sequence
  FROM ${s}.consumer_positions
 WHERE consumer = $1 AND aggregate_id = $2
   FOR UPDATE`;

/** Reads the position without locking (claim-first's pre-check); no row means 0. */
export const readPositionSql = (s: string) => `
SELECT last_sequence::text AS last_sequence
  FROM ${s}.consumer_positions
 WHERE consumer = $1 AND aggregate_id = $2`;

/** Moves the position forward, never back (GREATEST), creating the row if needed. */
export const advancePositionSql = (s: string) => `
INSERT INTO ${s}.consumer_positions AS p (consumer, aggregate_id, last_sequence, updated_at)
VALUES ($1, $2, $3::bigint, now())
ON CONFLICT (consumer, aggregate_id) DO UPDATE
   SET last_sequence = GREATEST(p.last_sequence, EXCLUDED.last_sequence), updated_at = now()`;
