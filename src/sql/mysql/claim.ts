import { NOW_MS } from './clock.js';

/**
 * The claim on MySQL 8 / MariaDB 10.6+, in short READ COMMITTED transactions of the store
 * (src/stores/mysql/mysql-outbox-store.ts): {@link claimCandidatesSql}, then {@link leaseSql} on
 * the heads it returned (and the parking of the rest, below), then COMMIT; then, when the batch
 * has room, the runs behind the ordered heads ({@link runsBehindSql}, {@link leaseRunsSql}) in a
 * second one. Publishing happens after the commits, outside any transaction; the lease (owner token + expiry) is what keeps other dispatchers away until the
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
 * Runs ({@link runsBehindSql}): behind each ordered head it took, a claim takes the next messages
 * of the head's chain, so a hot aggregate drains a batch per claim, not one message.
 *
 * Parked rows (migration 3). InnoDB has no partial indexes, so the rows queued behind a blocked
 * head (backing off, leased, dead under `hold`, or simply not settled yet) are in the claim's
 * range like any pending row; read and skipped by every claim, they made a claim's cost grow with
 * that backlog (900 blocked aggregates with 9 rows behind each: ~9,400 rows and ~20,000 page
 * accesses for a claim of 50). So the SELECT returns them too, flagged `head = 0` (NULL: no head
 * known), and the store parks them ({@link lockHeadsForParkingSql}, {@link parkSql}):
 * `parked = 1` moves a row out of the range of `outbox_claim_idx`
 * `(dispatched_at, dead_lettered_at, parked, available_at, id)`, and the settle that makes it its
 * aggregate's head puts it back (settle.ts `parkedHeadsSql`). Each row is read as a non-head
 * about once, not once per claim; the `LIMIT` counts heads and non-heads alike, so a round of the
 * claim reads about its limit (the store runs more rounds when one found rows to park and not a
 * full batch of heads, up to a parking budget: mysql-outbox-store.ts).
 * Why a claim, not the insert trigger or the settle, decides: a writer cannot tell whether its
 * message is the head while a settle of its aggregate runs (each can miss the other's row, as on
 * Postgres, src/sql/settle.ts), and a row parked wrongly would never be claimed; the claim
 * decides under the lock of the aggregate's `outbox_heads` row, which orders it against every
 * settle that moves that head (lockHeadsForParkingSql).
 *
 * The claim's head check is unchanged and is still the order guarantee (G4): `parked` only
 * decides which rows a claim reads.
 *
 * READ COMMITTED releases the locks of rows read and rejected by the WHERE at once (REPEATABLE
 * READ would keep them, and take gap locks writers would wait on); the rows returned (heads and
 * rows to park) stay locked until the claim commits, a few milliseconds.
 *
 * The scan starts at the store's floor (`available_at >= ?`, floor.ts): below it nothing is
 * pending and nothing can enter, so the delete-marked entries a held snapshot keeps from purge
 * are not stepped over. 0 when the store has no floor.
 * ? floor (ms), ? batch size.
 */
export const claimCandidatesSql = `
SELECT o.id, o.message_id, o.topic, o.aggregate_id, o.sequence, o.ordered, o.payload, o.headers,
       o.created_at, o.attempts,
       (o.ordered = 0
        OR o.sequence = coalesce((SELECT h.next_sequence FROM outbox_heads h
                                   WHERE h.aggregate_id = o.aggregate_id),
                                 (SELECT a.first_ordered_sequence FROM outbox_aggregates a
                                   WHERE a.aggregate_id = o.aggregate_id))) AS head
  FROM outbox o FORCE INDEX (outbox_claim_idx)
 WHERE o.dispatched_at IS NULL
   AND o.dead_lettered_at IS NULL
   AND o.parked = 0
   AND o.available_at >= ?
   AND o.available_at <= ${NOW_MS}
   AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ${NOW_MS})
 ORDER BY o.available_at, o.id
 LIMIT ?
 FOR UPDATE SKIP LOCKED`;

/**
 * Before parking: locks the `outbox_heads` rows of the aggregates of the rows to park, and reads
 * their heads. The store parks a row only when its aggregate's row was returned here and its
 * sequence is not the head read; rows of other aggregates are left unparked (always safe: an
 * unparked row is merely read again).
 *
 * Why this never parks a head for good. Only a settle moves a head (settle.ts
 * `advanceHeadsSql`, under the same row's lock), and in the same transaction, afterwards, it
 * unparks the row at the new head (`parkedHeadsSql`, a consistent read taken after its heads
 * write, then `unparkSql`). A settle that moved the head and committed before this read is seen
 * (a locking read returns the latest committed version). One that holds the row now (its
 * INSERT of the row included) is skipped, `SKIP LOCKED`: this claim parks nothing of that
 * aggregate. One that comes later waits for this claim's commit, so its unpark reads the rows
 * this claim parked. FOR UPDATE, not a shared lock: MySQL 8 takes `SKIP LOCKED` only with
 * FOR UPDATE / FOR SHARE, MariaDB only with FOR UPDATE / LOCK IN SHARE MODE. Never waits, so a
 * claim and a settle cannot deadlock here.
 *
 * An aggregate no settle has touched has no row here (its head is `first_ordered_sequence`):
 * {@link materializeHeadsSql} writes it first. ? list of aggregate ids.
 */
export const lockHeadsForParkingSql = `
SELECT aggregate_id, next_sequence FROM outbox_heads
 WHERE aggregate_id IN (?)
 ORDER BY aggregate_id
 FOR UPDATE SKIP LOCKED`;

/**
 * Before {@link lockHeadsForParkingSql}: gives an aggregate no settle has touched its
 * `outbox_heads` row, with the head it has anyway (`first_ordered_sequence`, which the claim's
 * head check falls back to), so that the rows behind a first head in flight can be parked too —
 * a fresh hot aggregate's backlog would otherwise fill every claim's `LIMIT` until its first
 * settle. The same value either way: the claim's and the settle's view of the head does not
 * change. An existing row is locked and left as it is (the no-op update), in aggregate order,
 * as settles lock them (two claims wait rather than deadlock). `outbox_aggregates` is read
 * without a lock (a writer holding its row is not waited for); NULL there means no ordered
 * message is committed yet, and nothing is written. ? list of aggregate ids.
 */
export const materializeHeadsSql = `
INSERT INTO outbox_heads (aggregate_id, next_sequence)
SELECT a.aggregate_id, a.first_ordered_sequence
  FROM outbox_aggregates a
 WHERE a.aggregate_id IN (?)
   AND a.first_ordered_sequence IS NOT NULL
 ORDER BY a.aggregate_id
ON DUPLICATE KEY UPDATE next_sequence = outbox_heads.next_sequence`;

/** Parks rows the claim holds (see {@link lockHeadsForParkingSql}). ? list of row ids. */
export const parkSql = `UPDATE outbox SET parked = 1 WHERE id IN (?)`;

/**
 * The runs behind ordered heads this claim leased: for each head, the next `share` pending
 * ordered messages of its chain in sequence order, from `outbox_chain_idx`
 * `(aggregate_id, ordered, dispatched_at, sequence)` — one seek and at most `share` rows per head,
 * whatever waits behind (a window function over the chain would read all of it first; MariaDB
 * has no LATERAL). One parenthesised SELECT per head, UNION ALL: one round trip. `free` says
 * whether the row can go now (due, not leased, not dead).
 *
 * Run twice by the store (mysql-outbox-store.ts): `locking` (FOR UPDATE SKIP LOCKED), then as a
 * consistent read, and a run is the committed chain from the head up to the first row that the
 * locking read did not get or that is not free. Why both: the chain's tail may be a writer's
 * insert not committed yet, which a plain FOR UPDATE would wait for (a claim must never wait for
 * a business transaction), so the locking read skips locked rows — but a committed row can be
 * locked too, for a moment, by another claim that is parking it, and taking the rows after such a
 * gap would send them before it. The consistent read shows the committed chain, gaps included; a
 * writer's rows are not in it, and nothing committed can follow them (sequences commit in order).
 *
 * Why a run keeps order (G4) and fencing (G3). The head is leased by this claim, and nothing but
 * its aggregate's head is ever claimed on its own (claimCandidatesSql), so no other claim can take
 * a message behind it while the lease holds; and no earlier message of the chain can still
 * appear between the head and a row taken, as sequences commit in order (schema.ts). The run is
 * leased in one statement with its head ({@link leaseRunsSql}): one expiry for the head and its
 * run, so a dispatcher that lost the head's lease lost the run's too, and its settles are fenced
 * for all of them. The dispatcher publishes a run in sequence order and stops at its first
 * failure, releasing the rest (src/dispatcher/ordered-publish.ts); the settle then moves the
 * head to the first message not published (settle.ts). Rows parked behind the head (above) are
 * read here through the chain index, parked or not.
 * ? per head: aggregate id, head sequence, share.
 */
export const runsBehindSql = (heads: number, locking: boolean): string =>
  Array.from(
    { length: heads },
    () => `(SELECT o.id, o.message_id, o.topic, o.aggregate_id, o.sequence, o.ordered, o.payload,
        o.headers, o.created_at, o.attempts,
        (o.available_at <= ${NOW_MS} AND o.dead_lettered_at IS NULL
         AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ${NOW_MS})) AS free
   FROM outbox o FORCE INDEX (outbox_chain_idx)
  WHERE o.aggregate_id = ? AND o.ordered = 1 AND o.dispatched_at IS NULL AND o.sequence > ?
  ORDER BY o.sequence
  LIMIT ?${locking ? '\n  FOR UPDATE SKIP LOCKED' : ''})`,
  ).join('\nUNION ALL\n');

/**
 * Leases runs with their heads: the heads (leased by this claim's earlier transaction, still its
 * own) get the same new expiry as their runs, and only the run rows count an attempt. ? owner
 * token, ? lease (ms), ? run row ids, ? heads' and run rows' ids, ? owner token, ? run row ids.
 */
export const leaseRunsSql = `
UPDATE outbox
   SET lease_owner = ?, lease_expires_at = ${NOW_MS} + ?, attempts = attempts + (id IN (?))
 WHERE id IN (?)
   AND (lease_owner = ? OR id IN (?))`;

/**
 * Leases the candidates (locked by the SELECT above, in the same transaction) and counts an
 * attempt on each: a message that kills its dispatcher mid-publish still runs out of attempts.
 * ? owner token, ? lease (ms), ? list of row ids.
 */
export const leaseSql = `
UPDATE outbox
   SET lease_owner = ?, lease_expires_at = ${NOW_MS} + ?, attempts = attempts + 1
 WHERE id IN (?)`;
