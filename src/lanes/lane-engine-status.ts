import type { OutboxStatus } from '../admin/status.js';
import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { laneAttemptsSql, laneEngineStatusSql, laneLastErrorsSql } from '../sql/lane-admin.js';
import { laneApprovalCountsSql } from '../sql/lane-approvals.js';
import { LANE_COUNT } from '../migrations/024-lanes.js';
import { listRoutePausesSql } from '../sql/route-pauses.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Ids of a lane, from the first after its cursor, that {@link readLaneEngineStatus} counts in
 * before it estimates the rest (one sequence numbers the 16 lanes: about this many messages in
 * all when the lanes are busy alike).
 */
export const LANE_STATUS_ID_WINDOW = 10_000;

/**
 * {@link OutboxStatus} of the lanes engine: the same fields, so that `outbox status`, the
 * Prometheus gauges and `/healthz` read the same on both engines, and one more.
 */
export interface LaneEngineStatus extends OutboxStatus {
  /**
   * A lane's messages after its cursor reach past `idWindow` ids from the first: its part of
   * `backlog` and `dueNow` is estimated from the density of the window (sql/lane-admin.ts
   * `laneEngineStatusSql`), not counted.
   */
  backlogEstimated: boolean;
}

/**
 * Reads the lanes engine's status as {@link OutboxStatus} (`readStatus` reads the claim
 * engine's). The cost is bounded, whatever the backlog: the messages in a window of `idWindow`
 * ids after each lane's cursor (a lane with more is estimated, see {@link LaneEngineStatus}), and
 * the failures (parked and dead rows).
 *
 * On the lanes engine every message after a cursor is due (it takes no delays), `inFlight` is 0
 * (a batch leases its lane, not rows), `scheduled` is the failures waiting for their retry, and
 * `backlog` also holds what is parked behind a failure of its aggregate. Held messages
 * (migration 027) are counted as on the claim engine (`awaitingApproval`, the oldest wait,
 * `rejected`, `expired`) and not as pending once the lane read has parked them (a held message
 * after a cursor is counted in `backlog` until its lane's read reaches it).
 *
 * @example
 * ```ts
 * const status = await readLaneEngineStatus(fromPg(pool));
 * console.log(status.backlog, status.oldestPendingAgeSeconds, status.deadLetters);
 * ```
 */
export async function readLaneEngineStatus(
  executor: SqlExecutor,
  options: { schema?: string; lastErrors?: number; idWindow?: number } = {},
): Promise<LaneEngineStatus> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const idWindow = options.idWindow ?? LANE_STATUS_ID_WINDOW;
  if (!Number.isInteger(idWindow) || idWindow < 1)
    throw new OutboxValidationError(
      'idWindow',
      `must be a positive integer, got ${String(idWindow)}`,
    );
  // Sequential: the executor may be one client.
  const summary = await executor.query<{
    backlog: string;
    dueNow: string;
    scheduled: string;
    backlogEstimated: boolean;
    oldestPendingAgeSeconds: number;
    deadLetters: string;
  }>(laneEngineStatusSql(schema), [idWindow, LANE_COUNT]);
  const attempts = await executor.query<{ attempts: number; messages: number }>(
    laneAttemptsSql(schema),
  );
  const errors = await executor.query<OutboxStatus['lastErrors'][number]>(
    laneLastErrorsSql(schema),
    [options.lastErrors ?? 5],
  );
  const pauses = await executor.query<OutboxStatus['pausedRoutes'][number]>(
    listRoutePausesSql(schema),
  );
  const approvals = await executor.query<{
    awaiting: number;
    oldestAgeSeconds: number;
    rejected: number;
    expired: number;
  }>(laneApprovalCountsSql(schema));
  const held = approvals.rows[0]!;
  const row = summary.rows[0]!;
  const backlog = Number(row.backlog);
  const parked = attempts.rows.map((r) => ({
    attempts: Number(r.attempts),
    messages: Number(r.messages),
  }));
  const parkedCount = parked.reduce((n, r) => n + r.messages, 0);
  // What is after the cursors has no attempts yet (a failure parks its message).
  const fresh = Math.max(0, backlog - parkedCount);
  const zero = parked.find((r) => r.attempts === 0);
  if (zero) zero.messages += fresh;
  else if (fresh > 0) parked.unshift({ attempts: 0, messages: fresh });
  return {
    backlog,
    oldestPendingAgeSeconds: Number(row.oldestPendingAgeSeconds),
    dueNow: Number(row.dueNow),
    inFlight: 0,
    scheduled: Number(row.scheduled),
    deadLetters: Number(row.deadLetters),
    awaitingApproval: Number(held.awaiting),
    oldestAwaitingApprovalAgeSeconds: Number(held.oldestAgeSeconds),
    rejected: Number(held.rejected),
    expired: Number(held.expired),
    attempts: parked,
    lastErrors: errors.rows.map((r) => ({ ...r, attempts: Number(r.attempts) })),
    pausedRoutes: pauses.rows.map((p) => ({
      route: p.route,
      reason: p.reason,
      pausedAt: new Date(p.pausedAt),
      pausedUntil: new Date(p.pausedUntil),
      failedProbes: Number(p.failedProbes),
    })),
    backlogEstimated: row.backlogEstimated,
  };
}
