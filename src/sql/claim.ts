import { blockedByPredecessorSql } from './lane.js';

/**
 * Claims due messages: ONE statement, so the row locks taken by FOR UPDATE SKIP LOCKED live only
 * for the statement's implicit transaction (microseconds) and the lease written by the UPDATE is
 * what keeps other dispatchers away while we publish OUTSIDE any transaction.
 *
 * The reference article commits its SKIP LOCKED transaction and then publishes: the locks are
 * gone and a second dispatcher claims the same rows (SPEC §11). Holding the transaction open
 * across the publish instead would pin a connection per batch and hold back vacuum. A lease with
 * a per-claim owner token (fencing, see settle.ts) has neither problem.
 *
 * What it reads (issue 16) — the cost follows the batch, not the backlog:
 *
 * 1. `heads`: up to `$2` READY rows (migration 009: unordered messages and aggregates' heads) that
 *    are due and not leased, oldest due first, from `outbox_ready_idx`. Rows queued behind a head
 *    are not in that index; neither are heads backing off (`available_at` ahead of the range) or
 *    dead-lettered. Only heads under a live lease are walked and skipped, and there are at most as
 *    many as messages in flight.
 *    Each ordered head is checked once more against its predecessor (`prev_id`, migration 012:
 *    one primary-key probe, see lane.ts `blockedByPredecessorSql`; before, a walk of
 *    `outbox_chain_idx` that a held snapshot made as long as the aggregate's history): `ready`
 *    is the index's hint, this check is the order guarantee (G4), so a stale `ready` can cost a
 *    probe but never order. The scan starts at the lane's floor (lane.ts), past the dead entries
 *    of what was settled before.
 * 2. `run`: for each ordered head, the messages right behind it in its chain — consecutive,
 *    stopping at the first one that is not due, is leased or dead-lettered — so one claim can take
 *    up to a batch of one hot aggregate (the dispatcher publishes a run in sequence order and stops
 *    at its first failure). The batch left after the heads is shared evenly between the runs, and
 *    each run reads at most its share from the chain index: the claim reads at most about `$2`
 *    rows plus the probes, whatever waits behind.
 * 3. The UPDATE leases heads and runs. Heads were locked by the scan (SKIP LOCKED: two dispatchers
 *    take different heads); a run's rows are reachable only through its head, whose lock we hold,
 *    so they are locked by the UPDATE itself, which re-checks them on their latest version.
 *
 * Tried and rejected:
 * - The previous claim (every pending row in the index, `NOT EXISTS` per candidate): 100,000
 *   messages behind one head cost every claim 1.9 s (100,001 probes), and so did a head in backoff
 *   or dead under `hold`.
 * - A skip scan over aggregates (recursive CTE over `(aggregate_id, sequence)`): costs a hop per
 *   aggregate with pending work, blocked or not, and cannot order heads by due time.
 * - A per-aggregate table of heads (graphile-worker's `job_queues`): the claim must then scan it
 *   with FOR UPDATE SKIP LOCKED (graphile-worker PR #558: high-cardinality queue names forced a
 *   database scale-up), and writers and settles contend on its rows.
 *
 * Why `sequence` and not `id` or xid8: `sequence` is assigned by the insert trigger under a row
 * lock on the aggregate's counter (migration 001), so a transaction writing the same aggregate
 * waits for the earlier one to commit: sequence order is commit order, and a snapshot can never
 * see sequence n+1 without n. Ordering by `id` lets a late-committing transaction (id 100
 * committing after 101) be overtaken. The xid8/pg_snapshot_xmin approach (Watermill) keeps global
 * commit order but makes every reader wait behind the oldest open transaction of the whole
 * database, ordered or not, and cannot express "per aggregate"; we only need per-aggregate order.
 *
 * Attempts are counted at claim time, so a message whose publish crashes the dispatcher (kill -9
 * or OOM in the middle of a batch) still runs out of attempts instead of crash-looping forever.
 * Messages of a run that are never tried (the run stopped earlier) are released with their
 * attempt given back (settle.ts `releaseSql`).
 *
 * It runs as a function (migration 011, `outbox_claim`), called by {@link claimSql}, so its plan is
 * made once per connection: planning was about as long as running it (0.23 ms and 0.12 ms for a
 * few messages), and every message's notify latency waits for a claim. Measured in the notify
 * bench's shape (1,000 msg/s, one message per aggregate, claim and settle both as functions):
 * claims 4.4–4.7 → 3.3–3.7 ms on average, latency p50 6.5 → 5.3–5.7 ms; in the full bench, notify
 * p95 back under graphile-worker's (README "Latency and throughput"). A cached plan went badly wrong here once
 * (statement-name.ts: a prepared claim's GENERIC plan, p95 11 → 225 ms); so the function is
 * declared with `enable_seqscan`, `enable_bitmapscan` and `enable_sort` off, which leaves every
 * plan — custom or generic, made on an empty outbox or a large one — one shape: `outbox_ready_idx`
 * walked in due order up to the LIMIT, one-row probes of `outbox_chain_idx`, the primary key for
 * the UPDATE (test/integration/dispatcher/claim-plan.test.ts reads the plans it caches).
 *
 * Changing this text changes the function only through a migration that re-creates it; see
 * settle.ts.
 */
/** The claim's parameters, as SQL expressions (the function's arguments and variables). */
export interface ClaimParams {
  owner: string;
  batch: string;
  leaseMs: string;
  floor: string;
}

/**
 * What makes a row of `outbox_ready_idx` a head to claim now (`o`): due, not leased, and — for an
 * ordered one — its predecessor not pending (the order check, G4). Shared with the tenant claim
 * (tenant-claim.ts), so both take heads by the same rule; `pending` is how "not dispatched, not
 * dead-lettered" is said, which decides the partial indexes a plan may use.
 */
export const dueHeadSql = (
  schema: string,
  floor: string,
  pending = `o.dispatched_at IS NULL
    AND o.dead_lettered_at IS NULL`,
) => `o.ready
    AND ${pending}
    AND o.available_at >= ${floor}
    AND o.available_at <= now()
    AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
    AND (
      o.ordered IS NOT TRUE
      OR o.prev_id IS NULL
      OR NOT ${blockedByPredecessorSql(schema, 'o.prev_id')}
    )`;

/**
 * The run behind head `h` (step 2 of the module comment): its chain's next messages, at most
 * `limit`, each with `unbroken` true while none before it (nor it) is not due, leased or
 * dead-lettered. A LATERAL subquery; shared with the tenant claim (tenant-claim.ts).
 */
export const runBehindSql = (schema: string, limit: string) => `SELECT n.id,
           bool_and(n.available_at <= now()
                    AND n.dead_lettered_at IS NULL
                    AND (n.lease_expires_at IS NULL OR n.lease_expires_at <= now()))
             OVER (ORDER BY n.sequence) AS unbroken
    FROM (
      SELECT p.id, p.sequence, p.available_at, p.dead_lettered_at, p.lease_expires_at
      FROM ${schema}.outbox p
      WHERE p.aggregate_id = h.aggregate_id
        AND p.sequence > h.sequence
        AND p.dispatched_at IS NULL
        AND p.ordered
      ORDER BY p.sequence
      LIMIT ${limit}
    ) n`;

/** What {@link claimRunsAndLeaseSql} adds for the tenant claim (tenant-claim.ts). */
export interface ClaimExtras {
  /** A CTE of ids taken before `heads`: they use up batch and are leased too. */
  taken?: string;
  /** Columns added to the result. */
  returning?: string;
}

/**
 * Everything after the `heads` CTE (steps 2 and 3 of the module comment): the runs behind the
 * ordered heads and the UPDATE that leases both.
 */
export const claimRunsAndLeaseSql = (
  schema: string,
  p: ClaimParams,
  extras: ClaimExtras = {},
) => `share AS (
  SELECT ((${p.batch}${extras.taken ? ` - (SELECT count(*) FROM ${extras.taken})` : ''} - count(*)) / greatest(count(*) FILTER (WHERE ordered), 1))::int AS per_run
  FROM heads
),
run AS MATERIALIZED (
  SELECT c.id
  FROM heads h
  CROSS JOIN share
  CROSS JOIN LATERAL (
    ${runBehindSql(schema, 'share.per_run')}
  ) c
  WHERE h.ordered AND share.per_run > 0 AND c.unbroken
)
UPDATE ${schema}.outbox o
SET lease_owner = ${p.owner},
    lease_expires_at = now() + ${p.leaseMs} * interval '1 millisecond',
    attempts = o.attempts + 1
WHERE o.id = ANY (ARRAY(SELECT id FROM heads UNION ALL SELECT id FROM run${extras.taken ? ` UNION ALL SELECT id FROM ${extras.taken}` : ''}))
  -- dispatched_at and dead_lettered_at both NULL, said so that no partial index ("WHERE
  -- dispatched_at IS NULL") matches: a plan cached on a small outbox then walked the whole of
  -- outbox_aggregate_pending_idx instead of the primary key once the table had grown
  -- (claim-plan.test.ts: 50,427 rows read for 200).
  AND num_nulls(o.dispatched_at, o.dead_lettered_at) = 2
  AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= now())
RETURNING o.id::text AS "rowId",
          o.message_id::text AS id,
          o.topic,
          o.aggregate_id AS "aggregateId",
          o.sequence::text AS sequence,
          o.ordered IS TRUE AS ordered,
          o.payload,
          o.headers,
          o.created_at AS "createdAt",
          o.attempts,
          o.shadow${extras.returning ?? ''}`;

/**
 * After a first part `fair` (ids, with the runs behind them in `fair_run`): what it took
 * (`taken`), then the rest of the batch oldest first as in claim.ts, skipping what it took, with
 * the runs behind those and the lease (`returning`: the columns added to the result). Shared by
 * the tenant claim and the runs-first claim (runs-first-claim.ts).
 */
export const restOfBatchSql = (
  schema: string,
  p: ClaimParams,
  returning: string,
) => `taken AS MATERIALIZED (
  SELECT id FROM fair
  UNION ALL
  SELECT id FROM fair_run
),
heads AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered
  FROM ${schema}.outbox o
  WHERE ${dueHeadSql(schema, p.floor)}
    -- our own locks do not skip: without this, a head both parts found would count twice
    AND NOT (o.id = ANY (ARRAY(SELECT id FROM fair)))
  ORDER BY o.available_at, o.id
  LIMIT ${p.batch} - (SELECT count(*) FROM taken)
  FOR UPDATE OF o SKIP LOCKED
),
${claimRunsAndLeaseSql(schema, p, { taken: 'taken', returning })}`;

/**
 * The claim's statement (see the module comment). `returning`: columns added to the result.
 */
export const claimQuery = (schema: string, p: ClaimParams, returning = '') => `
WITH heads AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered
  FROM ${schema}.outbox o
  WHERE ${dueHeadSql(schema, p.floor)}
  ORDER BY o.available_at, o.id
  LIMIT ${p.batch}
  FOR UPDATE OF o SKIP LOCKED
),
${claimRunsAndLeaseSql(schema, p, { returning })}`;

/** The variables of the lane's bookkeeping (see {@link claimFunctionSql}). */
export const claimDeclarations = `  v_started timestamptz := clock_timestamp();
  v_own_xid boolean := pg_current_xact_id_if_assigned() IS NULL;
  v_pair_at bigint;
  v_pair_xid bigint;
  v_safe bigint;
  v_floor bigint;
  v_first timestamptz;
  v_new bigint;
  v_promoted boolean := false;
  v_claimed bigint;
`;

/**
 * Before the claim: promote the recorded pair, move the floor up (sql/lane.ts). Leaves the
 * floor in `v_floor`.
 */
export const laneBeforeClaimSql = (
  schema: string,
) => `  -- The pair: its time first, then its xid (written in the other order, below).
  v_pair_at := coalesce(pg_sequence_last_value('${schema}.outbox_lane_pair_at'::regclass), 0);
  v_pair_xid := coalesce(pg_sequence_last_value('${schema}.outbox_lane_pair_xid'::regclass), 0);
  v_safe := coalesce(pg_sequence_last_value('${schema}.outbox_lane_safe'::regclass), 0);
  -- Promotable when no transaction of this database older than the pair's xid is still running
  -- (sql/lane.ts). Only this database's: writers of the outbox are connected to it, and the
  -- cluster-wide xmin would let any long transaction in any other database hold the floor.
  -- backend_xid is shown to every role, unlike the rest of pg_stat_activity.
  IF v_pair_xid = 0 OR (
    NOT EXISTS (
      SELECT 1
      FROM pg_stat_get_activity(NULL) a
      WHERE a.datid = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
        AND a.backend_xid IS NOT NULL
        AND a.pid <> pg_backend_pid()
        AND age(a.backend_xid) > age(xid(v_pair_xid::text::xid8)))
    AND NOT EXISTS (
      SELECT 1
      FROM pg_prepared_xacts x
      WHERE x.database = current_database()
        AND age(x.transaction) > age(xid(v_pair_xid::text::xid8)))
  ) THEN
    v_promoted := true;
    IF v_pair_at > v_safe THEN
      v_safe := v_pair_at;
      PERFORM setval('${schema}.outbox_lane_safe'::regclass, v_safe, true);
    END IF;
  END IF;
  -- The floor: up to the first pending row of the lane, never past the safe time.
  v_floor := coalesce(pg_sequence_last_value('${schema}.outbox_lane_floor'::regclass), 0);
  SELECT o.available_at INTO v_first
  FROM ${schema}.outbox o
  WHERE o.ready
    AND o.dispatched_at IS NULL
    AND o.dead_lettered_at IS NULL
    AND o.available_at >= timestamptz 'epoch' + v_floor * interval '1 microsecond'
  ORDER BY o.available_at, o.id
  LIMIT 1;
  v_new := CASE
    WHEN v_first IS NULL OR v_first = 'infinity' THEN v_safe
    ELSE least(v_safe, (extract(epoch FROM v_first) * 1000000)::bigint)
  END;
  IF v_new > v_floor THEN
    v_floor := v_new;
    PERFORM setval('${schema}.outbox_lane_floor'::regclass, v_floor, true);
  END IF;
`;

/** After the claim (`RETURN QUERY`): record the next pair when this claim may. */
export const laneAfterClaimSql = (schema: string) => `  GET DIAGNOSTICS v_claimed = ROW_COUNT;
  IF v_promoted AND v_own_xid
     AND (v_claimed > 0 OR (extract(epoch FROM v_started) * 1000000)::bigint - v_pair_at > 1000000)
  THEN
    PERFORM setval('${schema}.outbox_lane_pair_xid'::regclass,
                   pg_current_xact_id()::text::bigint, true);
    PERFORM setval('${schema}.outbox_lane_pair_at'::regclass,
                   (extract(epoch FROM v_started) * 1000000)::bigint, true);
  END IF;
`;

/**
 * What both claim functions (this one and tenant-claim.ts's) declare before their variables: the
 * rows they return (`extra`: more columns after `shadow`) and the settings {@link claimFunctionSql}
 * explains.
 */
export const claimFunctionHead = (
  extra: string,
) => `RETURNS TABLE ("rowId" text, id text, topic text, "aggregateId" text, sequence text,
               ordered boolean, payload jsonb, headers jsonb, "createdAt" timestamptz,
               attempts int, shadow boolean${extra})
LANGUAGE plpgsql
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
`;

/**
 * The function of {@link claimQuery} (migration 012; 011 made the first version without the lane
 * floor), `#variable_conflict` as in settle.ts. Around the claim, the lane's bookkeeping
 * (sql/lane.ts): promote the recorded pair when every xid below it finished, move the floor up to
 * the first pending row of the lane (never past the safe time), claim from the floor, and record
 * the next pair — only when this claim wrote (it has an xid taken after `v_started`), or at most
 * once a second when it did not (then it takes an xid for the pair: an idle dispatcher's empty
 * claims otherwise write nothing).
 *
 * `jit = off`: `enable_seqscan = off` prices a sequential scan at 10^10, which put any statement
 * with one (a sequence read as `SELECT last_value FROM seq`, in the first version of this
 * function) above `jit_above_cost`, and each call was JIT-compiled: 20–35 ms per statement, a
 * drain at 1,700 msg/s. The sequences are read with `pg_sequence_last_value()` (no scan), and JIT
 * is off for the function so that no plan of it can cross that line again.
 *
 * Called inside a transaction that already has an xid, it records no pair (that xid may be older
 * than `v_started`, which would make the pair unsafe); it still claims and may still move the
 * floor up to the safe time others recorded.
 */
export const claimFunctionSql = (schema: string) => `
CREATE OR REPLACE FUNCTION ${schema}.outbox_claim(p_owner text, p_batch int, p_lease_ms float8)
${claimFunctionHead('')}${claimDeclarations}BEGIN
${laneBeforeClaimSql(schema)}  RETURN QUERY${claimQuery(schema, {
  owner: 'p_owner',
  batch: 'p_batch',
  leaseMs: 'p_lease_ms',
  floor: "(timestamptz 'epoch' + v_floor * interval '1 microsecond')",
})};
${laneAfterClaimSql(schema)}END
$fn$`;

/**
 * Calls the claim (see the module comment and {@link claimQuery}).
 *
 * $1 lease owner token, $2 batch size, $3 lease in milliseconds.
 */
export const claimSql = (schema: string) =>
  `SELECT * FROM ${schema}.outbox_claim($1, $2::int, $3::float8)`;

/**
 * Marks every aggregate's first pending ordered message ready: a repair, run once when a
 * dispatcher starts. Nothing in this version leaves a head unmarked, but a dispatcher of a
 * version before migration 009 settling heads after the migration ran (a rolling upgrade) does
 * not mark their successors, and those would never be claimed. Marking a true head ready is
 * always safe (`ready` is the claim's hint; its head check is the guarantee), so this needs no
 * lock and can race with anything.
 *
 * A loose index scan over `outbox_chain_idx`: one probe per aggregate with pending ordered
 * messages — never the rows behind each head, never idle aggregates.
 */
export const repairHeadsSql = (schema: string) => `
WITH RECURSIVE heads AS (
  (SELECT p.aggregate_id, p.id
   FROM ${schema}.outbox p
   WHERE p.dispatched_at IS NULL AND p.ordered
   ORDER BY p.aggregate_id, p.sequence
   LIMIT 1)
  UNION ALL
  SELECT n.aggregate_id, n.id
  FROM heads h
  CROSS JOIN LATERAL (
    SELECT p.aggregate_id, p.id
    FROM ${schema}.outbox p
    WHERE p.dispatched_at IS NULL AND p.ordered AND p.aggregate_id > h.aggregate_id
    ORDER BY p.aggregate_id, p.sequence
    LIMIT 1
  ) n
)
UPDATE ${schema}.outbox o
SET ready = true
WHERE o.id = ANY (ARRAY(SELECT id FROM heads)) AND NOT o.ready
RETURNING o.id::text AS id`;
