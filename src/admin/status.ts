import { listRoutePausesSql } from '../sql/route-pauses.js';
import { engineFor } from './database-engine.js';
import { readLaneEngineStatus } from '../lanes/lane-engine-status.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import {
  attemptsDistributionSql,
  lastErrorsSql,
  laneShadowComparisonSql,
  shadowComparisonSql,
  statusSql,
} from '../sql/status.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** A snapshot of the outbox for `outbox status`, dashboards and health checks. */
export interface OutboxStatus {
  /** Undispatched, not dead-lettered messages, not held for approval. */
  backlog: number;
  /** Age of the oldest message in the backlog, in seconds (0 when empty). */
  oldestPendingAgeSeconds: number;
  /** Backlog messages a dispatcher could claim right now. */
  dueNow: number;
  /** Backlog messages under a live lease (being published). */
  inFlight: number;
  /** Backlog messages waiting for their `available_at` (delay or backoff). */
  scheduled: number;
  deadLetters: number;
  /**
   * Held messages waiting for a person's decision, not past their expiry (migration 010) — or
   * past it with `approvalOnExpiry: 'approve'` and not swept yet: the sweep approves those.
   */
  awaitingApproval: number;
  /** Age of the oldest of them, in seconds (0 when none waits). */
  oldestAwaitingApprovalAgeSeconds: number;
  /** Held messages a person rejected: kept, never published. */
  rejected: number;
  /**
   * Held messages that expired undecided (treated as rejected), swept or not yet; not those whose
   * deadline approves them.
   */
  expired: number;
  /** Undispatched messages by attempts so far. */
  attempts: { attempts: number; messages: number }[];
  /** Most recent errors of undispatched messages. */
  lastErrors: {
    id: string;
    messageId: string;
    topic: string;
    aggregateId: string;
    attempts: number;
    lastError: string;
    dead: boolean;
  }[];
  /**
   * Routes paused because their destination is down (issue 27): their messages wait without
   * attempts until a probe gets an answer. Empty when every route works.
   */
  pausedRoutes: {
    route: string;
    reason: string;
    pausedAt: Date;
    /** When the next probe may go. */
    pausedUntil: Date;
    failedProbes: number;
  }[];
}

/**
 * Reads {@link OutboxStatus} of the schema's engine (`readDatabaseEngine`, or `engine` when
 * given): on the claim engine its cost follows the backlog (partial indexes), not the table size;
 * on the lanes engine it is {@link readLaneEngineStatus} (bounded by a window of ids per lane,
 * `backlogEstimated` says when a part was estimated).
 *
 * @example
 * ```ts
 * const status = await readStatus(fromPg(pool));
 * if (status.deadLetters > 0) console.warn(`${status.deadLetters} dead letters`);
 * ```
 */
export async function readStatus(
  executor: SqlExecutor,
  options: { schema?: string; lastErrors?: number; engine?: 'claims' | 'lanes' } = {},
): Promise<OutboxStatus> {
  if ((await engineFor(executor, options.engine, options.schema)) === 'lanes')
    return readLaneEngineStatus(executor, {
      ...(options.schema !== undefined && { schema: options.schema }),
      ...(options.lastErrors !== undefined && { lastErrors: options.lastErrors }),
    });
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  // Sequential, not Promise.all: the executor may be one client, which runs one query at a time.
  const summary = await executor.query<Omit<OutboxStatus, 'attempts' | 'lastErrors'>>(
    statusSql(schema),
  );
  const attempts = await executor.query<{ attempts: number; messages: number }>(
    attemptsDistributionSql(schema),
  );
  const errors = await executor.query<OutboxStatus['lastErrors'][number]>(lastErrorsSql(schema), [
    options.lastErrors ?? 5,
  ]);
  const pauses = await executor.query<OutboxStatus['pausedRoutes'][number]>(
    listRoutePausesSql(schema),
  );
  const row = summary.rows[0]!;
  return {
    backlog: Number(row.backlog),
    oldestPendingAgeSeconds: Number(row.oldestPendingAgeSeconds),
    dueNow: Number(row.dueNow),
    inFlight: Number(row.inFlight),
    scheduled: Number(row.scheduled),
    deadLetters: Number(row.deadLetters),
    awaitingApproval: Number(row.awaitingApproval),
    oldestAwaitingApprovalAgeSeconds: Number(row.oldestAwaitingApprovalAgeSeconds),
    rejected: Number(row.rejected),
    expired: Number(row.expired),
    attempts: attempts.rows.map((r) => ({
      attempts: Number(r.attempts),
      messages: Number(r.messages),
    })),
    lastErrors: errors.rows.map((r) => ({ ...r, id: String(r.id), attempts: Number(r.attempts) })),
    pausedRoutes: pauses.rows.map((p) => ({
      route: p.route,
      reason: p.reason,
      pausedAt: new Date(p.pausedAt),
      pausedUntil: new Date(p.pausedUntil),
      failedProbes: Number(p.failedProbes),
    })),
  };
}

/** Shadow vs live message counts of one topic (retrofit shadow mode). */
export interface ShadowComparison {
  topic: string;
  shadow: number;
  live: number;
  shadowDispatched: number;
  liveDispatched: number;
}

/**
 * Per-topic shadow and live counts of messages created in the last `sinceSeconds` (default one
 * day). Scans that window of history: run it on demand, not on every scrape.
 */
export async function readShadowComparison(
  executor: SqlExecutor,
  options: {
    schema?: string;
    sinceSeconds?: number;
    /**
     * Which engine's messages (default: the schema's, `readDatabaseEngine`): `'lanes'` compares `createOutbox({ engine:
     * 'lanes' })`'s, dispatched meaning published by the lanes engine (past its lane's cursor).
     */
    engine?: 'claims' | 'lanes';
  } = {},
): Promise<ShadowComparison[]> {
  const engine = await engineFor(executor, options.engine, options.schema);
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const sql = engine === 'lanes' ? laneShadowComparisonSql(schema) : shadowComparisonSql(schema);
  const { rows } = await executor.query<ShadowComparison>(sql, [options.sinceSeconds ?? 86_400]);
  return rows.map((r) => ({
    topic: r.topic,
    shadow: Number(r.shadow),
    live: Number(r.live),
    shadowDispatched: Number(r.shadowDispatched),
    liveDispatched: Number(r.liveDispatched),
  }));
}
