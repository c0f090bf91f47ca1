import { listAwaitingApproval } from '../admin/approvals.js';
import { listCallApprovals } from '../admin/call-approvals.js';
import type { OutboxStatus } from '../admin/status.js';
import { quoteIdentifier } from '../core/identifier.js';
import { listLaneDeadLetters } from '../lanes/lane-admin.js';
import { readLaneEngineStatus } from '../lanes/lane-engine-status.js';
import { laneRetryingErrorsSql } from '../sql/dashboard-lanes.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { LaneDashboardSampler } from './lane-sampler.js';
import type { DashboardState } from './state.js';

/**
 * {@link DashboardState} of the lanes engine: the status from `readLaneEngineStatus` (bounded by
 * a window of ids a lane), its dead letters (ids `<lane>:<id>`; replayed by message id), the
 * failures still retrying, and the latency histogram the sampler gathered from the cursors (an
 * upper bound), the held messages (migration 027) and the paused tool calls (one table for both
 * engines) of the approvals panel.
 */
export async function readLaneDashboardState(
  executor: SqlExecutor,
  schema: string,
  sampler: LaneDashboardSampler,
): Promise<DashboardState> {
  // Sequential: the executor may be one client.
  const status = await readLaneEngineStatus(executor, { schema, lastErrors: 0 });
  const dead = await listLaneDeadLetters(executor, { schema, limit: 50 });
  const errors = await executor.query<OutboxStatus['lastErrors'][number]>(
    laneRetryingErrorsSql(quoteIdentifier(schema)),
    [10],
  );
  const approvals = await listAwaitingApproval(executor, { schema, limit: 50, engine: 'lanes' });
  const callApprovals = await listCallApprovals(executor, { schema, limit: 50 });
  const sampleError = sampler.lastError();
  return {
    engine: 'lanes',
    now: Date.now(),
    status,
    lastErrors: errors.rows.map((r) => ({ ...r, attempts: Number(r.attempts) })),
    samples: sampler.samples(),
    ...(sampleError !== undefined && { sampleError }),
    latency: sampler.latency(),
    // The payload stays out, as on the claim engine's panel (it can be large).
    deadLetters: dead.map(({ payload: _payload, ...letter }) => letter),
    approvals,
    callApprovals,
  };
}
