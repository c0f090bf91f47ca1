/**
 * Ledger statements (`processed_messages`, keyed by (consumer, message_id)). `s` is the already
 * validated, quoted schema name; every value is a parameter.
 */

/**
 * Transactional mode, first statement of the handler's transaction. The primary key makes it a
 * lock as well as a record: a second delivery of the same message inserting concurrently waits
 * for the first transaction, then inserts nothing if it committed (duplicate) or proceeds if it
 * rolled back (the effect did not happen). Returns one row when this transaction owns the
 * message. Tried and rejected: SELECT-then-INSERT (two deliveries both see "absent" and both run
 * the effect) and `SELECT ... FOR UPDATE` (locks nothing when the row does not exist yet).
 */
export const recordDoneSql = (s: string) => `
INSERT INTO ${s}.processed_messages (consumer, message_id, state, processed_at)
VALUES ($1, $2, 'done', now())
ON CONFLICT (consumer, message_id) DO NOTHING
RETURNING 1 AS recorded`;

/** State of one ledger row, and how long a claim still has, in ms (negative: expired). */
export const ledgerStateSql = (s: string) => `
SELECT state,
       (extract(epoch FROM (lease_expires_at - now())) * 1000)::float8 AS remaining_ms
  FROM ${s}.processed_messages
 WHERE consumer = $1 AND message_id = $2`;

/**
 * Claim-first: take the message, or take over a claim whose lease expired (its holder crashed
 * between the effect and `done`). A live claim or a done row is left alone: no row is returned
 * and {@link ledgerStateSql} tells which. The claim's `lease_expires_at` in microseconds is its
 * fencing token: a later claim always has a later expiry, so release/renew by an old holder
 * matches nothing. `takeover` tells the handler it is a retry after a lost holder.
 */
export const claimSql = (s: string) => `
INSERT INTO ${s}.processed_messages AS m
       (consumer, message_id, state, processed_at, lease_expires_at)
VALUES ($1, $2, 'claimed', now(), now() + $3::float8 * interval '1 millisecond')
ON CONFLICT (consumer, message_id) DO UPDATE
   SET lease_expires_at = EXCLUDED.lease_expires_at, processed_at = now()
 WHERE m.state = 'claimed' AND m.lease_expires_at < now()
RETURNING (extract(epoch FROM m.lease_expires_at) * 1000000)::bigint::text AS token,
          NOT (m.xmax = 0) AS takeover`;

/** Extends a live claim held by `token`; returns the new token, or no row if the claim is lost. */
export const renewClaimSql = (s: string) => `
UPDATE ${s}.processed_messages
   SET lease_expires_at = now() + $4::float8 * interval '1 millisecond'
 WHERE consumer = $1 AND message_id = $2 AND state = 'claimed'
   AND (extract(epoch FROM lease_expires_at) * 1000000)::bigint = $3::bigint
RETURNING (extract(epoch FROM lease_expires_at) * 1000000)::bigint::text AS token`;

/**
 * Claim-first: the effect happened. Not fenced on purpose: whoever performed the effect (with the
 * message id as idempotency key) may record it, even if its lease ran out meanwhile — the
 * effect is done either way, and a newer holder's call is a no-op at the API.
 */
export const completeClaimSql = (s: string) => `
UPDATE ${s}.processed_messages
   SET state = 'done', processed_at = now(), lease_expires_at = NULL
 WHERE consumer = $1 AND message_id = $2`;

/** Claim-first: the handler failed or deferred; free the message for the next delivery now. */
export const releaseClaimSql = (s: string) => `
DELETE FROM ${s}.processed_messages
 WHERE consumer = $1 AND message_id = $2 AND state = 'claimed'
   AND (extract(epoch FROM lease_expires_at) * 1000000)::bigint = $3::bigint`;
