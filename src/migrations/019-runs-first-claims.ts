import { tenantClaimFunctionSql } from '../sql/tenant-claim.js';
import type { Migration } from './migration.js';

/**
 * The runs-first claim (sql/runs-first-claim.ts, issue 25): `outbox_claim(owner, batch, lease,
 * tenant_after, max_heads)`, the tenant claim of migration 016 with a fifth argument; without
 * tenants and with `max_heads` given, it takes at most that many aggregates' heads and the runs
 * behind them before more heads.
 *
 * Rolling upgrade: a new overload, nothing else changes. Dispatchers of earlier versions keep
 * calling the three- and four-argument functions, as they were; a new dispatcher next to them
 * takes different rows (SKIP LOCKED), under the same head rule, so order holds between them.
 */
export const runsFirstClaims: Migration = {
  version: 19,
  name: 'runs-first-claims',
  up: (s) => [tenantClaimFunctionSql(s, true)],
};
