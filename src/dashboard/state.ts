import { listAwaitingApproval, type AwaitingApproval } from '../admin/approvals.js';
import { listCallApprovals, type CallApproval } from '../admin/call-approvals.js';
import { listDeadLetters, type DeadLetter } from '../admin/dead-letters.js';
import { readStatus, type OutboxStatus } from '../admin/status.js';
import { quoteIdentifier } from '../core/identifier.js';
import { latencyHistogramSql, retryingErrorsSql } from '../sql/dashboard.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { DashboardSample } from './sampler.js';

/** Lower edges of the latency histogram's buckets, in seconds; the last bucket is open-ended. */
export const LATENCY_EDGES_SECONDS = [0, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300];

/** Most dispatched rows the latency histogram reads. */
export const LATENCY_SAMPLE_ROWS = 10_000;

/** Everything the page shows, in one JSON document (`GET /api/state`). */
export interface DashboardState {
  /**
   * Which engine's messages: `claims` (the `outbox` table) or `lanes` (`outbox ui --engine
   * lanes`). On lanes the latency is an upper bound (from the lane cursors, see
   * docs/operations.md, "Dashboard"), and `approvals` and `callApprovals` are empty.
   */
  engine: 'claims' | 'lanes';
  /** Server time, ms since the epoch. */
  now: number;
  /** `lastErrors` is empty here: see {@link DashboardState.lastErrors}. */
  status: OutboxStatus;
  /**
   * Latest errors of messages still retrying (at most 10). Dead letters are not repeated here:
   * `deadLetters` has each with its last error.
   */
  lastErrors: OutboxStatus['lastErrors'];
  samples: DashboardSample[];
  /** Error of the latest background sample, if it failed. */
  sampleError?: string;
  latency: { edgesSeconds: number[]; counts: number[]; total: number };
  /**
   * On the lanes engine each also says whether it holds its aggregate back (`blocking`: Skip
   * applies, `skipLaneDeadLetters`).
   */
  deadLetters: (DeadLetter & { blocking?: boolean })[];
  /** Messages held for a decision, oldest first (at most 50): the approvals panel. */
  approvals: AwaitingApproval[];
  /** Agent tool calls paused for a decision (issue 42), oldest first (at most 50): same panel. */
  callApprovals: CallApproval[];
}

/** Reads the current state (status, dead letters, latency histogram) plus the sampled history. */
export async function readDashboardState(
  executor: SqlExecutor,
  schema: string,
  samples: DashboardSample[],
  sampleError?: string,
): Promise<DashboardState> {
  const [status, deadLetters, approvals, callApprovals, histogram, errors] = await Promise.all([
    readStatus(executor, { schema, lastErrors: 0, engine: 'claims' }),
    listDeadLetters(executor, { schema, limit: 50 }),
    listAwaitingApproval(executor, { schema, limit: 50, engine: 'claims' }),
    listCallApprovals(executor, { schema, limit: 50 }),
    executor.query<{ bucket: number; n: number }>(latencyHistogramSql(quoteIdentifier(schema)), [
      LATENCY_SAMPLE_ROWS,
      LATENCY_EDGES_SECONDS,
    ]),
    executor.query<OutboxStatus['lastErrors'][number]>(
      retryingErrorsSql(quoteIdentifier(schema)),
      [10],
    ),
  ]);
  const counts = LATENCY_EDGES_SECONDS.map(() => 0);
  for (const row of histogram.rows) {
    const index = Math.min(Math.max(Number(row.bucket) - 1, 0), counts.length - 1);
    counts[index]! += Number(row.n);
  }
  return {
    engine: 'claims',
    now: Date.now(),
    status,
    lastErrors: errors.rows.map((r) => ({ ...r, id: String(r.id), attempts: Number(r.attempts) })),
    samples,
    ...(sampleError !== undefined && { sampleError }),
    latency: {
      edgesSeconds: LATENCY_EDGES_SECONDS,
      counts,
      total: counts.reduce((a, b) => a + b, 0),
    },
    deadLetters,
    approvals,
    callApprovals,
  };
}
