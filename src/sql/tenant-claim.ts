import {
  claimDeclarations,
  claimFunctionHead,
  claimQuery,
  dueHeadSql,
  laneAfterClaimSql,
  laneBeforeClaimSql,
  restOfBatchSql,
  runBehindSql,
  type ClaimParams,
} from './claim.js';
import { runsFirstClaimQuery } from './runs-first-claim.js';

/**
 * Fair shares between tenants (issue 27): a claim that gives every tenant with due messages a
 * share of its batch, so one tenant's burst costs another about one claim of waiting, not the
 * whole burst.
 *
 * A message's tenant is its `tenant_id` header: `enqueue({ tenantId })` writes it, and so can a
 * plain INSERT (`headers = '{"tenant_id": "acme"}'`). The claim of claim.ts takes the oldest due
 * heads first: tenant A commits 30,000 messages, tenant B's next one is due after all of them and
 * waits until A's burst has drained (measured before this claim: B's commit → publish p50 5.4 s,
 * p95 9.1 s, while A drained in 9.7 s).
 *
 * The tenant claim, `outbox_claim(owner, batch, lease, tenant_after)` (migration 016):
 *
 * 1. The lane's bookkeeping, as in claim.ts (the floor).
 * 2. `v_tenants`: the tenants with ready rows, in name order, starting after the caller's cursor
 *    `tenant_after` (the last tenant its previous claim visited) and wrapping around to the first:
 *    a loose index scan of `outbox_tenant_ready_idx` ({@link tenantHopSql}), one descent per
 *    tenant, and at most half the batch of them ({@link visitedTenantsSql}). With more tenants than
 *    that, the next claim goes on where this one stopped (round-robin).
 * 3. No tenant found (nothing tenanted is pending): the claim of claim.ts, same statement, same
 *    plan. An outbox without tenants pays one probe of an empty index.
 * 4. Otherwise {@link tenantClaimQuery}: `fair`, for each visited tenant its oldest due heads
 *    (same head rule as claim.ts, {@link dueHeadSql}), at most `share` each — half the batch
 *    divided between the visited tenants, at least one each; `fair_run`, what the tenant's share
 *    leaves, divided between the runs behind its ordered heads (claim.ts step 2), so a tenant's
 *    ordered trickle on one aggregate moves a run per claim, not one message; then `heads`, the
 *    rest of the batch oldest due first as in claim.ts, skipping what `fair` took, with the runs
 *    behind them and the lease, as in claim.ts. So an idle system still drains one tenant's burst
 *    a full batch per claim (its share plus the oldest part), and while it drains every other
 *    tenant's due messages ride along in every claim. Measured end to end (one `outbox
 *    dispatch`, HTTP destination, test/integration/cli/cli-dispatch-tenants.test.ts): A's
 *    deliveries that overtook one of B's after its commit, 195–580 with tenant shares against
 *    2,083–5,855 with claim.ts alone (a burst of 6,000 on 2,000 aggregates). In the bench
 *    (`fair_share_p95_ms`, the issue's 30,000 on 3,000 aggregates, 2026-12-02): B's p95 207–245
 *    ms, against 4.1–7.5 s oldest first.
 *
 * Cost (G7): the tenant part reads, per visited tenant, one index descent to find it and one to
 * read its heads, and at most its share from the chains behind them — plus, like the oldest part,
 * the heads under a live lease it steps over — and visits at most half the batch of tenants
 * whatever their number. Read with EXPLAIN (ANALYZE, BUFFERS), a claim of 200 reads 653 rows with
 * one tenant of 100,000 due heads beside a small one, 701 rows with 1,000,000 tenants (generic
 * plan included; test/integration/dispatcher/tenant-claim-bound.test.ts). Both scans start at
 * the lane's floor, so what was settled before it is not read; in the hop the floor is a
 * condition on the index's second column, checked on the index entry without a heap visit, so a
 * held snapshot costs a visited tenant's hop the index entries it settled under that snapshot,
 * not their rows: 702 rows read after 10,000 and after 40,000 of a tenant's messages were
 * dispatched beside a held snapshot, buffers 1,540 → 1,888 (tenant-held-snapshot.test.ts). The
 * last tenant visited comes back with each row (`tenantCursor`), and the store passes it to its
 * next claim.
 *
 * Tried and rejected (on paper, for these reasons):
 * - A `tenant_id` column: a table rewrite (or a backfill) on the busiest table, and a plain INSERT
 *   setting only the header would need a trigger to fill it. The expression index needs neither,
 *   and a message without a tenant is not in it (a partial index): it costs nothing on insert.
 * - A table of tenants with pending work (one row each, as graphile-worker's `job_queues`):
 *   writers and settles would contend on a tenant's row, and a hot row piles up versions under a
 *   held snapshot that every claim then walks.
 * - Weighted shares or per-tenant limits in the database: nothing to configure them with yet; an
 *   equal share per visited tenant is the round-robin Hatchet and Temporal's fairness keys start
 *   from.
 *
 * Rolling upgrade: dispatchers of earlier versions keep calling the three-argument
 * `outbox_claim`, unchanged (no tenant shares for them); this overload is a separate function.
 */

/** The tenant of `o`: the key of `outbox_tenant_ready_idx` (migration 016). */
const TENANT = `(o.headers ->> 'tenant_id')`;

/**
 * "Not dispatched, not dead-lettered" as `outbox_tenant_ready_idx`'s predicate says it, and NOT
 * as `outbox_ready_idx`'s does (`dispatched_at IS NULL AND dead_lettered_at IS NULL`): a
 * statement that says it this way cannot use `outbox_ready_idx`, whose predicate it does not
 * imply. The per-tenant scans used it once the statistics were fresh — cheaper on paper, and the
 * scan for a small tenant then walked a big tenant's heads, filtering on the tenant.
 */
const TENANT_PENDING = 'num_nulls(o.dispatched_at, o.dead_lettered_at) = 2';

/** The lane floor as a time, from the bookkeeping's `v_floor` (claim.ts). */
const FLOOR = "(timestamptz 'epoch' + v_floor * interval '1 microsecond')";

/**
 * The next tenant after `after` (an SQL expression; `NULL`: the first) with a ready row at or
 * above the floor: one descent of `outbox_tenant_ready_idx`. Ready rows of a tenant that are not
 * due still make it visited (its share is then unused and goes to the oldest part): asking for
 * due ones here would walk every not-due head of the tenant in the index. The floor is not a
 * range on the leading column, so it is checked on each index entry — which skips what a held
 * snapshot kept below it without reading the table.
 */
const tenantHopSql = (schema: string, after: string | null) => `(
      SELECT ${TENANT}
      FROM ${schema}.outbox o
      WHERE o.ready
        AND ${TENANT_PENDING}
        AND ${TENANT} IS NOT NULL
        AND o.available_at >= ${FLOOR}${after === null ? '' : `\n        AND ${TENANT} > ${after}`}
      ORDER BY ${TENANT}
      LIMIT 1)`;

/**
 * The tenants to visit (step 2 of the module comment), a loose index scan as a recursive CTE
 * whose hops stop when the outer LIMIT is met. `from` `null` starts at the first tenant; `upTo`
 * (an SQL expression, `null` for none) ends the wrapped-around part at the cursor, included.
 */
const visitedTenantsSql = (
  schema: string,
  from: string | null,
  upTo: string | null,
  limit: string,
) => `ARRAY(
    WITH RECURSIVE t AS (
      SELECT ${tenantHopSql(schema, from)} AS tenant
      UNION ALL
      SELECT ${tenantHopSql(schema, 't.tenant')}
      FROM t
      WHERE t.tenant IS NOT NULL${upTo === null ? '' : ` AND t.tenant < ${upTo}`}
    )
    SELECT t.tenant FROM t
    WHERE t.tenant IS NOT NULL${upTo === null ? '' : ` AND t.tenant <= ${upTo}`}
    LIMIT ${limit})`;

/**
 * Step 4 of the module comment. `v_tenants` are the visited tenants, `v_share` the messages each
 * may take, `v_cursor` the last tenant visited.
 */
const tenantClaimQuery = (schema: string, p: ClaimParams) => `
WITH fair AS MATERIALIZED (
  SELECT t.tenant, f.id, f.aggregate_id, f.sequence, f.ordered
  FROM unnest(v_tenants) AS t(tenant)
  CROSS JOIN LATERAL (
    SELECT o.id, o.aggregate_id, o.sequence, o.ordered
    FROM ${schema}.outbox o
    WHERE ${TENANT} = t.tenant
      AND ${dueHeadSql(schema, p.floor, TENANT_PENDING)}
    ORDER BY o.available_at, o.id
    LIMIT v_share
    FOR UPDATE OF o SKIP LOCKED
  ) f
),
fair_share AS (
  SELECT f.tenant,
         ((v_share - count(*)) / greatest(count(*) FILTER (WHERE f.ordered), 1))::int AS per_run
  FROM fair f
  GROUP BY f.tenant
),
fair_run AS MATERIALIZED (
  SELECT c.id
  FROM fair h
  JOIN fair_share s ON s.tenant = h.tenant
  CROSS JOIN LATERAL (
    ${runBehindSql(schema, 's.per_run')}
  ) c
  WHERE h.ordered AND s.per_run > 0 AND c.unbroken
),
${restOfBatchSql(schema, p, `,\n          v_cursor AS "tenantCursor"`)}`;

/**
 * The tenant claim (migration 016), with claim.ts's settings and lane bookkeeping; see the module
 * comment. `p_tenant_after` is the caller's round-robin cursor (`NULL` at first).
 */
export const tenantClaimFunctionSql = (
  schema: string,
  /**
   * The overload of migration 019 (runs-first-claims.ts): a fifth argument, `p_max_heads`, and
   * without tenants the runs-first claim when it is not NULL.
   */
  runsFirst = false,
) => {
  const p: ClaimParams = {
    owner: 'p_owner',
    batch: 'p_batch',
    leaseMs: 'p_lease_ms',
    floor: FLOOR,
  };
  const plain = claimQuery(schema, p, `,\n          NULL::text AS "tenantCursor"`);
  const untenanted = runsFirst
    ? `IF p_max_heads IS NULL THEN
      RETURN QUERY${plain};
    ELSE
      RETURN QUERY${runsFirstClaimQuery(schema, p, 'p_max_heads')};
    END IF;`
    : `RETURN QUERY${plain};`;
  return `
CREATE OR REPLACE FUNCTION ${schema}.outbox_claim(p_owner text, p_batch int, p_lease_ms float8,
                                                  p_tenant_after text${runsFirst ? ', p_max_heads int' : ''})
${claimFunctionHead(', "tenantCursor" text')}${claimDeclarations}  v_visit int := greatest(p_batch / 2, 1);
  v_tenants text[];
  v_share int;
  v_cursor text;
BEGIN
${laneBeforeClaimSql(schema)}  IF p_tenant_after IS NULL THEN
    v_tenants := ${visitedTenantsSql(schema, null, null, 'v_visit')};
  ELSE
    v_tenants := ${visitedTenantsSql(schema, 'p_tenant_after', null, 'v_visit')};
    IF cardinality(v_tenants) < v_visit THEN
      v_tenants := v_tenants || ${visitedTenantsSql(
        schema,
        null,
        'p_tenant_after',
        'v_visit - cardinality(v_tenants)',
      )};
    END IF;
  END IF;
  IF cardinality(v_tenants) = 0 THEN
    ${untenanted}
  ELSE
    v_share := greatest((p_batch / 2) / cardinality(v_tenants), 1);
    v_cursor := v_tenants[cardinality(v_tenants)];
    RETURN QUERY${tenantClaimQuery(schema, p)};
  END IF;
${laneAfterClaimSql(schema)}END
$fn$`;
};

/**
 * Calls the tenant claim. $1 lease owner token, $2 batch size, $3 lease in milliseconds, $4 the
 * tenant cursor (the `tenantCursor` of the previous claim's rows, or `NULL`).
 */
export const tenantClaimSql = (schema: string) =>
  `SELECT * FROM ${schema}.outbox_claim($1, $2::int, $3::float8, $4::text)`;

/**
 * Calls the runs-first overload (migration 019, runs-first-claim.ts): as {@link tenantClaimSql},
 * and $5 the most aggregates' heads to take before the runs behind them (`NULL`: heads first,
 * the claim above).
 */
export const runsFirstTenantClaimSql = (schema: string) =>
  `SELECT * FROM ${schema}.outbox_claim($1, $2::int, $3::float8, $4::text, $5::int)`;
