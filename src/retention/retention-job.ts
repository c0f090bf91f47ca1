import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { OutboxValidationError } from '../core/errors.js';
import {
  DEFAULT_LEDGER_RETENTION_MS,
  pruneLedger,
  type PruneLedgerResult,
} from '../consumer/prune-ledger.js';
import { TypedEmitter } from '../dispatcher/events.js';
import { retentionUnlockSql, tryRetentionLockSql } from '../sql/retention.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { pruneDedupeKeys, type PruneDedupeKeysResult } from './prune-dedupe-keys.js';
import { pruneOutbox, resolvePruneOptions, type PruneOutboxResult } from './prune-outbox.js';

/**
 * One database session (connection) for a retention run. The advisory lock is session-level, so
 * the lock, the batches and the unlock must run on the same connection — not on a pool, whose
 * statements may each land on another connection.
 */
export interface RetentionSession {
  executor: SqlExecutor;
  /** Gives the connection back; `broken: true` when it may still hold the lock (destroy it). */
  release(broken?: boolean): void | Promise<void>;
}

/** The part of a `pg` Pool that {@link poolSessions} calls. */
export interface PgSessionPool {
  connect(): Promise<{
    query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
    release(destroy?: boolean | Error): void;
  }>;
}

/** Sessions from a `pg` Pool: `createRetentionJob({ connect: poolSessions(pool) })`. */
export function poolSessions(pool: PgSessionPool): () => Promise<RetentionSession> {
  return async () => {
    const client = await pool.connect();
    return {
      executor: {
        async query<Row>(text: string, values?: readonly unknown[]) {
          const result = await client.query(text, values ? [...values] : undefined);
          return { rows: result.rows as Row[] };
        },
      },
      release: (broken) => client.release(broken === true),
    };
  };
}

/** Options of {@link createRetentionJob}. Durations in milliseconds. */
export interface RetentionJobOptions {
  /** Opens the session a run holds its lock on (see {@link poolSessions}). */
  connect: () => Promise<RetentionSession>;
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  /** Dispatched outbox rows older than this go. Default 30 days. */
  olderThanMs?: number;
  /** Done ledger rows older than this go; `null` leaves the ledger alone. Default 14 days. */
  ledgerOlderThanMs?: number | null;
  /** Move outbox rows to `outbox_archive` instead of deleting. Default false. */
  archive?: boolean;
  /** Rows per batch (per transaction). Default 1000. */
  batchSize?: number;
  /** Bounds one run (per table); the next run continues. Default 1000 batches. */
  maxBatchesPerRun?: number;
  /** Time between scheduled runs. Default one hour. */
  intervalMs?: number;
}

/** What one run did. `ran: false` when another runner held the lock. */
export type RetentionRunResult =
  | { ran: false }
  | {
      ran: true;
      outbox: PruneOutboxResult;
      ledger: PruneLedgerResult | null;
      /** Expired dedupe keys (`outbox_dedupe_keys`); null when the run stopped before them. */
      dedupeKeys: PruneDedupeKeysResult | null;
    };

/** Events of a {@link RetentionJob}. */
export interface RetentionEventMap {
  'retention:run:success': [RetentionRunResult & { ran: true; durationMs: number }];
  /** Another process holds the retention lock for this schema: this run did nothing. */
  'retention:run:skipped': [];
  'retention:run:failure': [{ error: Error }];
}

/**
 * Scheduled retention with one runner per schema at a time (`pg_try_advisory_lock`): run it in
 * every dispatcher process, and whichever gets the lock prunes while the others skip.
 */
export interface RetentionJob {
  /** One run now. Resolves `{ ran: false }` when another runner holds the lock. */
  runOnce(): Promise<RetentionRunResult>;
  /** Runs now and then every `intervalMs` until {@link RetentionJob.stop}. Errors are events. */
  start(): void;
  /** Stops scheduling; a run in progress stops after its current batch. Idempotent. */
  stop(): Promise<void>;
  on: TypedEmitter<RetentionEventMap>['on'];
}

/**
 * Creates a {@link RetentionJob}.
 *
 * @example
 * ```ts
 * const retention = createRetentionJob({ connect: poolSessions(pool), archive: true });
 * retention.on('retention:run:failure', ({ error }) => log.error(error));
 * retention.start();
 * process.on('SIGTERM', () => retention.stop());
 * ```
 */
export function createRetentionJob(options: RetentionJobOptions): RetentionJob {
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  quoteIdentifier(schemaName);
  const prune = resolvePruneOptions({ ...options, schema: schemaName });
  const maxBatches = options.maxBatchesPerRun ?? 1000;
  const intervalMs = options.intervalMs ?? 3_600_000;
  if (!Number.isInteger(intervalMs) || intervalMs < 1)
    throw new OutboxValidationError('intervalMs', `must be a positive integer, got ${intervalMs}`);
  if (typeof options.connect !== 'function')
    throw new OutboxValidationError('connect', 'give a session factory, e.g. poolSessions(pool)');
  const ledgerMs =
    options.ledgerOlderThanMs === null
      ? null
      : (options.ledgerOlderThanMs ?? DEFAULT_LEDGER_RETENTION_MS);
  const events = new TypedEmitter<RetentionEventMap>();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> = Promise.resolve();

  async function runOnce(): Promise<RetentionRunResult> {
    const session = await options.connect();
    let broken = false;
    try {
      const { rows } = await session.executor.query<{ locked: boolean }>(tryRetentionLockSql, [
        schemaName,
      ]);
      if (!rows[0]?.locked) return { ran: false };
      try {
        const outbox = await pruneOutbox(session.executor, {
          olderThanMs: prune.olderThanMs,
          batchSize: prune.batchSize,
          maxBatches,
          archive: options.archive ?? false,
          schema: schemaName,
          shouldStop: () => stopped,
        });
        const ledger =
          ledgerMs === null || stopped
            ? null
            : await pruneLedger(session.executor, {
                olderThanMs: ledgerMs,
                batchSize: prune.batchSize,
                maxBatches,
                schema: schemaName,
              });
        const dedupeKeys = stopped
          ? null
          : await pruneDedupeKeys(session.executor, {
              batchSize: prune.batchSize,
              maxBatches,
              schema: schemaName,
            });
        return { ran: true, outbox, ledger, dedupeKeys };
      } finally {
        // A connection back in the pool still holding the lock would block every later run.
        await session.executor.query(retentionUnlockSql, [schemaName]).catch(() => {
          broken = true;
        });
      }
    } catch (error) {
      broken = true;
      throw error;
    } finally {
      await session.release(broken);
    }
  }

  async function scheduled(): Promise<void> {
    const started = Date.now();
    try {
      const result = await runOnce();
      if (result.ran)
        events.emit('retention:run:success', { ...result, durationMs: Date.now() - started });
      else events.emit('retention:run:skipped');
    } catch (error) {
      events.emit('retention:run:failure', {
        error: error instanceof Error ? error : new Error(String(error)),
      });
    }
    if (!stopped) {
      timer = setTimeout(() => (current = scheduled()), intervalMs);
      timer.unref();
    }
  }

  return {
    runOnce: () => {
      const run = runOnce();
      current = run.catch(() => undefined);
      return run;
    },
    start() {
      if (stopped || timer) return;
      timer = setTimeout(() => (current = scheduled()), 0);
      timer.unref();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await current.catch(() => undefined);
    },
    on: (event, listener) => events.on(event, listener),
  };
}
