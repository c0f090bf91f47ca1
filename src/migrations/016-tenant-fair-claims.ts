import { tenantClaimFunctionSql } from '../sql/tenant-claim.js';
import type { Migration } from './migration.js';

/**
 * Fair shares between tenants (issue 27, sql/tenant-claim.ts).
 *
 * - `outbox_tenant_ready_idx`: the ready rows that carry a tenant (`tenant_id` header), by
 *   tenant, then due time. An expression index, partial on the tenant: no column is added (no
 *   rewrite, no backfill), a message without a tenant is not in it and costs nothing on insert,
 *   and a plain INSERT that sets the header is in it like one written by `enqueue({ tenantId })`.
 *   `headers` is never updated, so claims stay HOT as before (they write only lease columns);
 *   settles already changed columns of `outbox_ready_idx`. Its predicate says "pending" as
 *   `num_nulls(dispatched_at, dead_lettered_at) = 2`, so that the tenant claim's per-tenant scans
 *   can use it and no other index (sql/tenant-claim.ts `TENANT_PENDING`).
 * - `outbox_claim(owner, batch, lease, tenant_after)`: the tenant claim, a new overload. The
 *   three-argument `outbox_claim` is left as it is, so a dispatcher of an earlier version keeps
 *   working during a rolling upgrade (without tenant shares).
 *
 * The index holds only pending ready rows with a tenant (a few per aggregate at most), but
 * building it reads the whole table under a SHARE lock, which blocks writers for that time.
 * `IF NOT EXISTS`: on a large outbox build it first without blocking writers, with the same
 * definition and `CREATE INDEX CONCURRENTLY`, and this migration then skips it.
 */
export const tenantFairClaims: Migration = {
  version: 16,
  name: 'tenant-fair-claims',
  up: (s) => [
    `
CREATE INDEX IF NOT EXISTS outbox_tenant_ready_idx
  ON ${s}.outbox ((headers ->> 'tenant_id'), available_at, id)
  WHERE ready AND num_nulls(dispatched_at, dead_lettered_at) = 2
    AND (headers ->> 'tenant_id') IS NOT NULL`,
    tenantClaimFunctionSql(s),
  ],
};
