import { emptiedAggregatesCtes } from './emptied-aggregates.js';

/**
 * Decisions on held messages (migration 010): approve, reject, and the expiry sweep. `s` is the
 * validated, quoted schema name.
 *
 * A held message waits with `available_at = infinity`, so no claim ever reaches it (claim.ts) and
 * its chain keeps its usual shape: ordered, pending, `ready` when it is its aggregate's head.
 *
 * - Approving changes `available_at` back and nothing else: the message is then due, and claimed
 *   like any other — as a ready head, or in the run behind its head. No chain changes, no race.
 * - Rejecting (or expiring) dead-letters it: kept, never published. Under the `hold` dead-letter
 *   policy it stays in its chain (ordered, pending) and blocks what follows, as a dead letter
 *   under `hold` does. Under `skip` it leaves the chain (`ordered = false`) and the next message
 *   of its aggregate may have to be marked ready — the one thing here that races (below).
 *
 * Exactly one decision wins: every statement locks the messages it decides (`FOR NO KEY UPDATE`)
 * and changes only rows still `awaiting`; an approve and a reject of the same message cannot
 * both see it undecided. The API's statements lock `NOWAIT` (the caller retries a moment later
 * and then finds the message decided, a clear error) instead of queueing behind each other, and
 * decide all or nothing: one message already decided, expired or not held, or one id not found,
 * and nothing is changed.
 */

/**
 * Leaving a chain under `skip`, and who becomes ready. Expects a CTE `leaving(id, aggregate_id,
 * sequence, ready)`: the ordered messages leaving their chains now, locked, latest versions.
 *
 * For each leaving message R: `prev` is the nearest pending ordered message before it that is not
 * leaving too, `next` the first after it. R's successor must be marked ready when R was in effect
 * its aggregate's head. At this statement's snapshot that is "no prev" — but a snapshot can be
 * stale in exactly the case that matters. The dispatcher settling prev (published) marks ITS
 * next ready, computed from the settle's own snapshot; if that snapshot predates this statement's
 * commit, it marks R (dead now, out of the index) instead of R's successor, which would never be
 * claimed. So R's successor is also marked ready when prev is "in motion": leased (a claim holds
 * it: a settle may come), locked right now (a claim or settle is at work on it: SKIP LOCKED
 * skipped it), or no longer pending in its latest version (a settle committed after our snapshot
 * — and then R itself is `ready` in its latest version, which counts too). Otherwise prev stays
 * put until this statement commits: its row is locked here, so no claim can take it, and its
 * settle comes later, with a snapshot that sees R gone from the chain.
 * Marking a successor ready while prev is in motion can be a stale `true` for as long as prev is
 * pending (usually the moment a publish takes): the claim's head check keeps order, and the probe
 * is the whole cost. It is never marked behind a prev that stays put (dead under `hold`, held,
 * backing off): that would cost every claim a probe for as long.
 *
 * When R has no successor at all, a writer mid-transaction may be adding one — decided in the
 * insert trigger while R still counted as pending, so not ready (the race of settle.ts
 * `settleAdvanceSql`). The same cure: take the aggregate's counter row FOR NO KEY UPDATE SKIP
 * LOCKED; if a writer holds it, or committed after our snapshot (`last_sequence` moved), the
 * aggregate is `deferred` (nothing of it is decided now; the caller retries), else the counter row
 * is updated to itself so a REPEATABLE READ writer with an older snapshot fails and retries.
 *
 * Produces `moving(aggregate_id, next_id)` and `deferred(aggregate_id)`, and the locked counter
 * rows `locked(aggregate_id)`.
 */
const leaveChainCtes = (s: string) => `
around AS MATERIALIZED (
  SELECT l.id, l.aggregate_id, l.ready, prev.id AS prev_id, nxt.id AS next_id
  FROM leaving l
  LEFT JOIN LATERAL (
    SELECT p.id
    FROM ${s}.outbox p
    WHERE p.aggregate_id = l.aggregate_id
      AND p.sequence < l.sequence
      AND p.dispatched_at IS NULL
      AND p.ordered
      AND p.id <> ALL (ARRAY(SELECT id FROM leaving))
    ORDER BY p.sequence DESC
    LIMIT 1
  ) prev ON true
  LEFT JOIN LATERAL (
    SELECT p.id
    FROM ${s}.outbox p
    WHERE p.aggregate_id = l.aggregate_id
      AND p.sequence > l.sequence
      AND p.dispatched_at IS NULL
      AND p.ordered
      AND p.id <> ALL (ARRAY(SELECT id FROM leaving))
    ORDER BY p.sequence
    LIMIT 1
  ) nxt ON true
),
prev_now AS MATERIALIZED (
  SELECT p.id, p.dispatched_at IS NULL AND p.ordered AND p.lease_owner IS NULL AS stays
  FROM ${s}.outbox p
  WHERE p.id = ANY (ARRAY(SELECT prev_id FROM around WHERE prev_id IS NOT NULL))
  FOR NO KEY UPDATE SKIP LOCKED
),
moving AS MATERIALIZED (
  SELECT a.aggregate_id, a.next_id
  FROM around a
  WHERE a.prev_id IS NULL
     OR a.ready
     OR NOT EXISTS (SELECT 1 FROM prev_now n WHERE n.id = a.prev_id AND n.stays)
),
${emptiedAggregatesCtes(s, 'SELECT aggregate_id FROM moving WHERE next_id IS NULL')}`;

/** The rows a decision locks and reports on (latest versions: locking reads them). */
const WANTED_COLUMNS = `o.id, o.message_id, o.topic, o.aggregate_id, o.sequence, o.ordered, o.ready,
         o.dispatched_at, o.approval_state, o.approval_expires_at, o.approval_decided_by,
         o.approval_decided_at`;

/**
 * The requested rows: those in the outbox locked (latest versions), and those already dispatched
 * into the log (migrations 018 and 021, through its lookup functions) read as they are, so that a decision on a message that went out
 * is refused as dispatched, as it was when the row stayed in the outbox, not as unknown.
 */
const wantedCtes = (s: string) => `in_outbox AS MATERIALIZED (
  SELECT ${WANTED_COLUMNS}
  FROM ${s}.outbox o
  WHERE o.id = ANY ($1::bigint[]) OR o.message_id = ANY ($2::uuid[])
  ORDER BY o.id
  FOR NO KEY UPDATE NOWAIT
),
wanted AS MATERIALIZED (
  SELECT * FROM in_outbox
  UNION ALL
  SELECT ${WANTED_COLUMNS}
  FROM (
    SELECT * FROM ${s}.outbox_dispatched_by_id($1::bigint[])
    UNION
    SELECT * FROM ${s}.outbox_dispatched_by_message_id($2::uuid[])
  ) o
  WHERE o.dispatched_at IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM in_outbox l WHERE l.id = o.id)
)`;

/** Requested ids that match no row: the decision is then refused as a whole. */
const MISSING_CTE = `
missing AS (
  SELECT r.id FROM unnest($1::bigint[]) AS r(id)
  WHERE NOT EXISTS (SELECT 1 FROM wanted w WHERE w.id = r.id)
  UNION ALL
  SELECT NULL FROM unnest($2::uuid[]) AS m(id)
  WHERE NOT EXISTS (SELECT 1 FROM wanted w WHERE w.message_id = m.id)
)`;

/** A message is decidable while it waits, unexpired and unpublished. */
const UNDECIDABLE = `approval_state IS DISTINCT FROM 'awaiting' OR approval_expires_at <= now()
                      OR dispatched_at IS NOT NULL`;

/** What every decision returns per requested row: its state BEFORE this statement, and whether it decided it. */
const REPORT = `
SELECT w.id::text AS id,
       w.message_id::text AS "messageId",
       w.topic,
       w.aggregate_id AS "aggregateId",
       w.approval_state AS state,
       w.approval_expires_at AS "expiresAt",
       w.approval_decided_by AS "decidedBy",
       w.approval_decided_at AS "decidedAt",
       w.dispatched_at IS NOT NULL AS dispatched,
       w.id IN (SELECT id FROM decided) AS decided`;

/**
 * Approves held messages: `available_at` back to what the message was written with, or now if
 * that has passed. The dispatcher claims it from there (a ready head at once; a message behind
 * one when its turn comes). All or nothing (see the file comment).
 *
 * `ready` is normally right already (the insert trigger and the settle keep it while the message
 * waits), but an approved head is also marked ready here when no pending ordered message precedes
 * it — one probe of `outbox_chain_idx` — so approving a head makes it claimable even if something
 * (an older dispatcher, a manual change) left its flag unset. Marking a true head is always safe
 * (claim.ts: `ready` is the scan's hint, the head check the guarantee); a predecessor settled after
 * this snapshot marks it anyway.
 *
 * $1 row ids (bigint[]), $2 message ids (uuid[]), $3 decided by, $4 note (or NULL).
 */
export const approveSql = (s: string) => `
WITH ${wantedCtes(s)},${MISSING_CTE},
go AS (
  SELECT NOT EXISTS (SELECT 1 FROM missing)
     AND NOT EXISTS (SELECT 1 FROM wanted WHERE ${UNDECIDABLE}) AS ok
),
decided AS (
  UPDATE ${s}.outbox o
  SET approval_state      = 'approved',
      approval_decided_by = $3,
      approval_decided_at = now(),
      approval_note       = $4,
      available_at        = greatest(coalesce(o.approval_available_at, now()), now()),
      ready               = o.ready OR o.ordered IS NOT TRUE OR NOT EXISTS (
                              SELECT 1 FROM ${s}.outbox p
                              WHERE p.aggregate_id = o.aggregate_id
                                AND p.sequence < o.sequence
                                AND p.dispatched_at IS NULL
                                AND p.ordered)
  WHERE o.id = ANY (ARRAY(SELECT id FROM wanted))
    AND (SELECT ok FROM go)
    AND o.approval_state = 'awaiting'
  RETURNING o.id
)${REPORT},
       false AS deferred
FROM wanted w
ORDER BY w.id`;

/**
 * Rejects held messages: dead-lettered with the reason (`approval_note`), never published.
 * `$5` true is the `skip` policy: ordered ones leave their chains (`ordered = false`) and a
 * successor becomes ready where one must ({@link leaveChainCtes}); false (`hold`) leaves the
 * chains as they are, so a rejected head blocks its aggregate. All or nothing, and nothing at all
 * while a writer of an emptied aggregate is mid-transaction (`deferred`: retry shortly).
 *
 * $1 row ids (bigint[]), $2 message ids (uuid[]), $3 decided by, $4 reason, $5 skip (boolean).
 */
export const rejectSql = (s: string) => `
WITH ${wantedCtes(s)},${MISSING_CTE},
leaving AS MATERIALIZED (
  SELECT id, aggregate_id, sequence, ready
  FROM wanted
  WHERE $5::boolean AND ordered AND NOT (${UNDECIDABLE})
),${leaveChainCtes(s)},
go AS (
  SELECT NOT EXISTS (SELECT 1 FROM missing)
     AND NOT EXISTS (SELECT 1 FROM wanted WHERE ${UNDECIDABLE})
     AND NOT EXISTS (SELECT 1 FROM deferred) AS ok
),
bumped AS (
  UPDATE ${s}.outbox_aggregates a
  SET last_sequence = a.last_sequence
  WHERE a.aggregate_id = ANY (ARRAY(SELECT aggregate_id FROM locked))
    AND (SELECT ok FROM go)
),
readied AS (
  UPDATE ${s}.outbox o
  SET ready = true
  WHERE o.id = ANY (ARRAY(SELECT next_id FROM moving WHERE next_id IS NOT NULL))
    AND NOT o.ready
    AND (SELECT ok FROM go)
),
decided AS (
  UPDATE ${s}.outbox o
  SET approval_state      = 'rejected',
      approval_decided_by = $3,
      approval_decided_at = now(),
      approval_note       = $4,
      dead_lettered_at    = now(),
      ordered             = CASE WHEN $5::boolean THEN false ELSE o.ordered END
  WHERE o.id = ANY (ARRAY(SELECT id FROM wanted))
    AND (SELECT ok FROM go)
    AND o.approval_state = 'awaiting'
  RETURNING o.id
)${REPORT},
       EXISTS (SELECT 1 FROM deferred) AS deferred
FROM wanted w
ORDER BY w.id`;

/**
 * The expiry sweep: up to `$1` messages whose `approval_expires_at` has passed become `expired`
 * — treated as rejected (dead-lettered, the policy applied as by {@link rejectSql}), decided by
 * `expiry`. Dispatchers run it before a claim, at most every `approvalSweepIntervalMs` (and again
 * at once after a full batch): `outbox_awaiting_approval_idx` makes it one index probe when
 * nothing is overdue. Rows another statement holds are skipped (SKIP LOCKED), and so is an
 * aggregate a writer is mid-transaction on (`deferred`): the next sweep takes them.
 * Until swept, an overdue message is already expired for everyone else: it cannot be approved,
 * and status, metrics and the effect status count it as expired.
 *
 * A message written with `approvalOnExpiry: 'approve'` (`approval_on_expiry`, migration 013) is
 * approved instead, by `expiry`, exactly as {@link approveSql} approves: `available_at` back,
 * `ready` where it is a head. It never leaves its chain, so it takes no part in `leaving`.
 * In the same statement, under the same locks, as the expiries: one sweep, one batch limit.
 *
 * $1 batch size, $2 skip (boolean). Returns the rows decided (expired or approved).
 */
export const expireSql = (s: string) => `
WITH wanted AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered, o.ready,
         o.approval_on_expiry IS NOT DISTINCT FROM 'approve' AS approve
  FROM ${s}.outbox o
  WHERE o.approval_state = 'awaiting' AND o.approval_expires_at <= now()
  ORDER BY o.approval_expires_at
  LIMIT $1
  FOR NO KEY UPDATE SKIP LOCKED
),
leaving AS MATERIALIZED (
  SELECT id, aggregate_id, sequence, ready FROM wanted WHERE $2::boolean AND ordered AND NOT approve
),${leaveChainCtes(s)},
bumped AS (
  UPDATE ${s}.outbox_aggregates a
  SET last_sequence = a.last_sequence
  WHERE a.aggregate_id = ANY (ARRAY(
    SELECT aggregate_id FROM locked EXCEPT SELECT aggregate_id FROM deferred))
),
readied AS (
  UPDATE ${s}.outbox o
  SET ready = true
  WHERE o.id = ANY (ARRAY(
    SELECT next_id FROM moving
    WHERE next_id IS NOT NULL AND aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))))
    AND NOT o.ready
),
approved AS (
  UPDATE ${s}.outbox o
  SET approval_state      = 'approved',
      approval_decided_by = 'expiry',
      approval_decided_at = now(),
      approval_note       = 'approved on expiry: no decision before ' ||
                            to_char(o.approval_expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
      available_at        = greatest(coalesce(o.approval_available_at, now()), now()),
      ready               = o.ready OR o.ordered IS NOT TRUE OR NOT EXISTS (
                              SELECT 1 FROM ${s}.outbox p
                              WHERE p.aggregate_id = o.aggregate_id
                                AND p.sequence < o.sequence
                                AND p.dispatched_at IS NULL
                                AND p.ordered)
  WHERE o.id = ANY (ARRAY(SELECT id FROM wanted WHERE approve))
    AND o.approval_state = 'awaiting'
  RETURNING o.id::text AS id, o.message_id::text AS "messageId", o.topic, o.approval_state AS state
),
expired AS (
UPDATE ${s}.outbox o
SET approval_state      = 'expired',
    approval_decided_by = 'expiry',
    approval_decided_at = now(),
    approval_note       = 'no decision before ' || to_char(o.approval_expires_at AT TIME ZONE 'UTC',
                                                          'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
    dead_lettered_at    = now(),
    ordered             = CASE WHEN $2::boolean THEN false ELSE o.ordered END
WHERE o.id = ANY (ARRAY(
    SELECT id FROM wanted
    WHERE NOT approve AND aggregate_id <> ALL (ARRAY(SELECT aggregate_id FROM deferred))))
  AND o.approval_state = 'awaiting'
RETURNING o.id::text AS id, o.message_id::text AS "messageId", o.topic, o.approval_state AS state
)
SELECT * FROM expired
UNION ALL
SELECT * FROM approved`;

/**
 * Messages waiting for a decision, oldest first, from `outbox_awaiting_approval_idx` (it holds
 * only these). Overdue ones are left out: they are expired, whether swept yet or not.
 * The tenant filter keeps a tenant-scoped caller to its own messages.
 *
 * $1 topic LIKE pattern or NULL, $2 limit, $3 tenant id or NULL.
 */
export const listAwaitingSql = (s: string) => `
SELECT o.id::text AS id,
       o.message_id::text AS "messageId",
       o.topic,
       o.aggregate_id AS "aggregateId",
       o.sequence::text AS sequence,
       o.payload,
       o.headers->>'traceparent' AS traceparent,
       o.headers->>'tenant_id' AS "tenantId",
       o.approval_requested_by AS "requestedBy",
       o.created_at AS "createdAt",
       o.approval_expires_at AS "expiresAt",
       o.approval_available_at AS "availableAt",
       extract(epoch FROM now() - o.created_at)::float8 AS "ageSeconds"
FROM ${s}.outbox o
WHERE o.approval_state = 'awaiting'
  AND o.approval_expires_at > now()
  AND ($1::text IS NULL OR o.topic LIKE $1)
  AND ($3::text IS NULL OR o.headers->>'tenant_id' = $3)
ORDER BY o.created_at, o.id
LIMIT $2`;

/**
 * Wakes idle dispatchers after an approval (migration 005's channel), as a committed insert
 * would: only while one waits. An approval is no INSERT, so the trigger does not do it.
 *
 * $1 channel.
 */
export const wakeAfterApprovalSql = (s: string) => `
SELECT pg_notify($1, '')
FROM (SELECT 1) one
WHERE EXISTS (SELECT 1 FROM ${s}.outbox_waiters WHERE expires_at > clock_timestamp())`;
