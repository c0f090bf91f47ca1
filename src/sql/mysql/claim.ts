import { NOW_MS } from './clock.js';

/**
 * The claim on MySQL 8 / MariaDB 10.6+, in one short READ COMMITTED transaction of the store
 * (src/stores/mysql/mysql-outbox-store.ts): {@link claimCandidatesSql}, then {@link leaseSql} on
 * the rows it returned, then COMMIT. Publishing happens after the commit, outside any
 * transaction; the lease (owner token + expiry) is what keeps other dispatchers away until the
 * settle, and the settle is fenced by the token (settle.ts) — the row locks are only held for the
 * few milliseconds between the SELECT and the UPDATE.
 *
 * `FOR UPDATE SKIP LOCKED` (MySQL 8.0.1+, MariaDB 10.6+): two dispatchers claiming at the same
 * moment skip each other's candidate rows instead of waiting for them, and never get the same
 * row — the second sees the first's lease once it commits.
 *
 * Per-aggregate order (G4): an ordered message is claimable only when it is its aggregate's
 * head, `sequence = outbox_heads.next_sequence`, or for an aggregate no settle has touched yet,
 * `outbox_aggregates.first_ordered_sequence` (schema.ts). Both are read without a lock (a
 * consistent read: a writer holding the aggregate's row is not waited for). A stale
 * `next_sequence` is only ever lower than the truth (it only grows), and the row at a lower
 * sequence is then already dispatched, unordered or dead — excluded by the locked, current read
 * of the row itself; a stale `first_ordered_sequence` is NULL (it is set once and never
 * changes), which claims nothing. Staleness can delay a head by one claim but never lets a
 * successor overtake. Tried: `NOT EXISTS (an earlier pending ordered
 * row)` on the outbox itself, the Postgres and SQLite shape. In READ COMMITTED the subquery reads
 * a snapshot taken at the statement's start while the locking outer read sees rows committed
 * since; a predecessor and its successor committed in between would let the successor through
 * with its predecessor unseen.
 *
 * One head per aggregate per claim: a hot aggregate drains one message per claim, not a run.
 * Rows behind a blocked head (backing off, leased, dead under `hold`) are read and skipped by
 * every claim (no partial index to leave them out), so a claim's cost grows with such a backlog
 * — see docs/mysql.md.
 *
 * The index `outbox_pending_idx (dispatched_at, dead_lettered_at, available_at, id)` serves the
 * `IS NULL` pair as an equality prefix and the ORDER BY in index order: the claim stops after
 * `LIMIT` claimable rows. READ COMMITTED releases the locks of rows read and rejected at once
 * (REPEATABLE READ would keep them, and take gap locks writers would wait on).
 * ? batch size.
 */
export const claimCandidatesSql = `
SELECT o.id, o.message_id, o.topic, o.aggregate_id, o.sequence, o.ordered, o.payload, o.headers,
       o.created_at, o.attempts
  FROM outbox o FORCE INDEX (outbox_pending_idx)
 WHERE o.dispatched_at IS NULL
   AND o.dead_lettered_at IS NULL
   AND o.available_at <= ${NOW_MS}
   AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ${NOW_MS})
   AND (o.ordered = 0
        OR o.sequence = coalesce((SELECT h.next_sequence FROM outbox_heads h
                                   WHERE h.aggregate_id = o.aggregate_id),
                                 (SELECT a.first_ordered_sequence FROM outbox_aggregates a
                                   WHERE a.aggregate_id = o.aggregate_id)))
 ORDER BY o.available_at, o.id
 LIMIT ?
 FOR UPDATE SKIP LOCKED`;

/**
 * Leases the candidates (locked by the SELECT above, in the same transaction) and counts an
 * attempt on each: a message that kills its dispatcher mid-publish still runs out of attempts.
 * ? owner token, ? lease (ms), ? list of row ids.
 */
export const leaseSql = `
UPDATE outbox
   SET lease_owner = ?, lease_expires_at = ${NOW_MS} + ?, attempts = attempts + 1
 WHERE id IN (?)`;
