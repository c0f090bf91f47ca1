import { dueHeadSql, restOfBatchSql, runBehindSql, type ClaimParams } from './claim.js';

/**
 * The runs-first claim (migration 019, issue 25): a batch of a few aggregates' heads with the runs
 * behind them, instead of as many heads as the batch holds.
 *
 * Why. The claim of claim.ts takes due heads first and gives the runs behind them only what the
 * heads leave of the batch: with 500 aggregates each 100 messages deep, every claim of 200 is 200
 * heads and no run, so every message is published alone and its settle marks its successor ready
 * — a non-HOT update of the successor (`ready` is in the predicate of `outbox_ready_idx`: a new
 * version and an entry in each of the outbox's five btrees, and the BEFORE UPDATE trigger's row
 * lock). That flip was most of the ordered settle: 14 of its 19 ms for 200 messages, read with
 * auto_explain (2026-12-03). A run of n messages is claimed, published and settled together and
 * flips one successor, not n. What the heads-first claim buys is parallelism for a publisher
 * that sends one message per call: a run goes out one round per message (ordered-publish.ts), so
 * ten messages of one aggregate take ten calls. So the dispatcher asks for this claim only when
 * a round costs next to nothing — a publisher that sends a whole run in one call
 * (`ordersWithinCall`), or one whose calls return in well under a millisecond (claim-shape.ts).
 *
 * What it reads:
 * 1. `fair`: at most `heads` due heads, oldest first (the head rule of claim.ts, `dueHeadSql`),
 *    locked with SKIP LOCKED as there.
 * 2. `fair_run`: behind each ordered one, its run (claim.ts step 2), the batch left after those
 *    heads shared evenly between them.
 * 3. `heads`: if that left room (short chains, unordered messages, heads blocked), more heads
 *    oldest first, skipping those of step 1, with what room is then left shared between their
 *    runs, and the lease over all of it — the statement of claim.ts after its first step, with
 *    steps 1 and 2 as what was `taken` (as the tenant claim does, tenant-claim.ts). So a batch is
 *    as full as with the heads-first claim whatever the shape of the backlog; only what fills it
 *    changes.
 *
 * The reads stay bounded by the batch (G7): `heads` entries of `outbox_ready_idx` and their
 * predecessor probes, at most the batch from the chain index, then the second walk of
 * `outbox_ready_idx`, which passes over the `heads` entries of step 1 (locked by this statement:
 * skipped by the `NOT ... = ANY` filter) before it reads the rest.
 *
 * Measured with a no-op publisher, 50,000 messages on 500 aggregates, batch 200 (2026-12-03, this
 * machine, best of three alternated drains): heads first 21.0k msg/s; at most 100 heads 26.0k, 50
 * heads 28.7k, 20 heads 33.3k; the dispatcher asks for 10 (claim-shape.ts `RUN_LENGTH`).
 */
export const runsFirstClaimQuery = (schema: string, p: ClaimParams, heads: string) => `
WITH fair AS MATERIALIZED (
  SELECT o.id, o.aggregate_id, o.sequence, o.ordered
  FROM ${schema}.outbox o
  WHERE ${dueHeadSql(schema, p.floor)}
  ORDER BY o.available_at, o.id
  LIMIT least(greatest(${heads}, 1), ${p.batch})
  FOR UPDATE OF o SKIP LOCKED
),
fair_share AS (
  SELECT ((${p.batch} - count(*)) / greatest(count(*) FILTER (WHERE ordered), 1))::int AS per_run
  FROM fair
),
fair_run AS MATERIALIZED (
  SELECT c.id
  FROM fair h
  CROSS JOIN fair_share s
  CROSS JOIN LATERAL (
    ${runBehindSql(schema, 's.per_run')}
  ) c
  WHERE h.ordered AND s.per_run > 0 AND c.unbroken
),
${restOfBatchSql(schema, p, `,\n          NULL::text AS "tenantCursor"`)}`;
