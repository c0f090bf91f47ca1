import type { Duplex } from 'node:stream';
import type { ConnectionOptions } from 'node:tls';
import type { DispatcherOptions } from '../dispatcher/options.js';
import type { ReconnectDelayOptions } from '../dispatcher/wake/reconnect-delay.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * The connection settings of a `pg` `ClientConfig`, typed structurally so the published
 * declarations of `agent-outbox/cdc` do not need `@types/pg` (a development dependency of ours;
 * without it a user's `replicationConnection` would silently be `any`). A real `ClientConfig`
 * value fits. Left out: `types` (the stream's rows are decoded from pgoutput, not by `pg`'s type
 * parsers) and `pipeline` (query pipelining has no use on a replication connection).
 */
export interface PgConnectionConfig {
  connectionString?: string | undefined;
  host?: string | undefined;
  port?: number | undefined;
  user?: string | undefined;
  password?: string | (() => string | Promise<string>) | undefined;
  database?: string | undefined;
  ssl?: boolean | ConnectionOptions | undefined;
  sslnegotiation?: 'postgres' | 'direct' | undefined;
  enableChannelBinding?: boolean | undefined;
  stream?: (() => Duplex | undefined) | undefined;
  application_name?: string | undefined;
  fallback_application_name?: string | undefined;
  connectionTimeoutMillis?: number | undefined;
  keepAlive?: boolean | undefined;
  keepAliveInitialDelayMillis?: number | undefined;
  options?: string | undefined;
  client_encoding?: string | undefined;
  statement_timeout?: false | number | undefined;
  query_timeout?: number | undefined;
  lock_timeout?: number | undefined;
  idle_in_transaction_session_timeout?: number | undefined;
}

/** Options of {@link createCdcDispatcher}; the polling options apply to both workers. */
export interface CdcDispatcherOptions extends Omit<
  DispatcherOptions,
  // `asyncClaim` stays: the stream's claims (candidate-store.ts) and the sweeper's commit alike,
  // both with the crash-recovery guard (sql/commit-mode.ts: every claimer of an outbox alike).
  'executor' | 'store' | 'wakeSource' | 'pollIntervalMs'
> {
  /** Where claims, settles and the sweeper run: `fromPg(pool)`. */
  executor: SqlExecutor;
  /**
   * Connection for the replication stream (a `pg` ClientConfig; `replication: 'database'` is
   * added). The role needs the REPLICATION attribute; the server `wal_level = logical`.
   */
  replicationConnection: PgConnectionConfig;
  /** Default `agent_outbox_<database>_<schema>`. Slots are cluster-wide. */
  slotName?: string;
  /** Default `agent_outbox_<schema>`. Created (INSERTs of the outbox only) when missing. */
  publicationName?: string;
  /** Poll interval of the sweeper, the polling dispatcher that catches what CDC did not. Default 30 000. */
  sweepIntervalMs?: number;
  /** Report the confirmed position to the server at least this often. Default 1 000. */
  confirmIntervalMs?: number;
  /** Emit `cdc:slot:lag` this often. Default 10 000. */
  lagIntervalMs?: number;
  /** Re-check candidates that another dispatcher holds or that wait on a predecessor. Default 250. */
  recheckMs?: number;
  /**
   * Candidates kept in memory at most; beyond it the stream pauses (and later resumes from the
   * confirmed position). Default 100 000.
   */
  maxCandidates?: number;
  /**
   * Messages due within this (backoff, delayed delivery) wake the WAL-driven worker at their due
   * time; later ones are left to the sweeper. Default 60 000.
   */
  maxHoldMs?: number;
  reconnectDelay?: Partial<ReconnectDelayOptions>;
  /**
   * The replication stream counts as lost when nothing arrived on it (no change, no keepalive)
   * for this long, and is reopened from the confirmed position; connecting and starting it have
   * the same bound. The dispatcher asks the server for a keepalive every `confirmIntervalMs`, so
   * a live stream is never silent for long; a connection that a network partition froze
   * (nothing closed, no error) is otherwise noticed by nothing. The replication connection also
   * gets TCP keepalive (first probe after 10 s idle) unless `replicationConnection` says
   * otherwise. Must exceed `confirmIntervalMs`. Default 10 000.
   */
  streamTimeoutMs?: number;
}

/** Connection-level failures: SQLSTATE classes 08 (connection) and 57 (operator intervention). */
export function isConnectionLoss(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^(08|57)/.test(code)) return true;
  const message = error instanceof Error ? error.message : String(error);
  return /Connection terminated|ECONNREFUSED|ECONNRESET|EPIPE/i.test(message);
}

/**
 * START_REPLICATION's answer when the slot does not exist (SQLSTATE 42704, undefined_object):
 * after a failover to a standby that had no copy of it, or a manual drop.
 */
export function isSlotMissing(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  return /replication slot .* does not exist/i.test(message);
}
