/**
 * Settles a claimed batch in ONE statement (one transaction): published rows get
 * `dispatched_at`, retried rows their next `available_at` and `last_error`, dead rows
 * `dead_lettered_at`; every row's lease is cleared. Decisions travel as one JSON parameter,
 * because D1 caps bound parameters per statement at 100.
 *
 * Fencing: `lease_owner = ?1`, the token of this claim. If our lease expired and another run
 * re-claimed a row, this matches nothing for it and the newer claim decides. RETURNING lists the
 * rows settled, so the dispatcher can count fenced-off ones.
 *
 * ?1 lease owner, ?2 JSON array of {id, kind: published|retry|dead, error, delayMs}, ?3 now (ms).
 */
export const settleSql = `
UPDATE outbox
   SET dispatched_at    = CASE WHEN s.kind = 'published' THEN ?3 ELSE outbox.dispatched_at END,
       dead_lettered_at = CASE WHEN s.kind = 'dead' THEN ?3 ELSE outbox.dead_lettered_at END,
       available_at     = CASE WHEN s.kind = 'retry' THEN ?3 + s.delay_ms ELSE outbox.available_at END,
       last_error       = CASE WHEN s.kind = 'published' THEN outbox.last_error ELSE s.error END,
       lease_owner      = NULL,
       lease_expires_at = NULL
  FROM (SELECT json_extract(value, '$.id') AS id,
               json_extract(value, '$.kind') AS kind,
               json_extract(value, '$.error') AS error,
               CAST(json_extract(value, '$.delayMs') AS INTEGER) AS delay_ms
          FROM json_each(?2)) AS s
 WHERE outbox.id = s.id
   AND outbox.lease_owner = ?1
RETURNING outbox.id AS id`;

/**
 * Gives back leases on messages this claim never started sending (the time budget ran out
 * between claim and send), and the attempt counted for them.
 */
export const releaseSql = `
UPDATE outbox
   SET lease_owner = NULL, lease_expires_at = NULL, attempts = max(attempts - 1, 0)
 WHERE lease_owner = ?1
   AND id IN (SELECT value FROM json_each(?2))
   AND dispatched_at IS NULL`;
