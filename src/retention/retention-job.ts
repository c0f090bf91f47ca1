import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { OutboxValidationError } from '../core/errors.js';
import {
  DEFAULT_LEDGER_RETENTION_MS,
  pruneLedger,
  type PruneLedgerResult,
} from '../consumer/prune-ledger.js';
import { TypedEmitter } from '../dispatcher/events.js';
import { tryRetentionLockSql } from '../sql/retention.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { pruneDedupeKeys, type PruneDedupeKeysResult } from './prune-dedupe-keys.js';
import { pruneOutbox, resolvePruneOptions, type PruneOutboxResult } from './prune-outbox.js';

/**
 * One database connection for a retention run. Each batch is a transaction of its own that takes
 * the retention lock first (`BEGIN`, the lock, the batch, `COMMIT`), so those statements must run
 * on one connection — not on a pool, whose statements may each land on another one. Nothing is
 * kept between batches: a connection through a transaction pooler (PgBouncer, Supavisor) is fine.
 */
export interface RetentionSession {
  executor: SqlExecutor;
  /** Gives the connection back; `broken: true` when a transaction may still be open (destroy it). */
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
  /** Move outbox rows to `outbox_archive` (lanes: `outbox_lane_archive`) instead of deleting. Default false. */
  archive?: boolean;
  /** Rows per batch (per transaction). Default 1000. */
  batchSize?: number;
  /** Bounds one run (per table); the next run continues. Default 1000 batches. */
  maxBatchesPerRun?: number;
  /** Time between scheduled runs. Default one hour. */
  intervalMs?: number;
}

/**
 * What one run did. `ran: false` when another runner held the lock at the run's first batch. A
 * run that finds it taken at a later batch stops there (the other runner carries on): its counts
 * are what it removed until then, and a table it had not finished is `null`.
 */
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
 * Scheduled retention with one batch per schema at a time (`pg_try_advisory_xact_lock`, taken in
 * each batch's transaction): run it in every dispatcher process, and whichever gets the lock
 * prunes while the others skip. No lock outlives its transaction, so a crash, a dropped
 * connection or a transaction pooler never leaves one behind.
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
    const locked = lockedBatches(session.executor, schemaName);
    const archive = options.archive ?? false;
    // What is done so far, for a run another runner takes over (LockTaken below).
    let outbox: PruneOutboxResult = { removed: 0, batches: 0, archived: archive };
    let ledger: PruneLedgerResult | null = null;
    let step: 'outbox' | 'ledger' | 'dedupe' = 'outbox';
    try {
      outbox = await pruneOutbox(locked.executor, {
        olderThanMs: prune.olderThanMs,
        batchSize: prune.batchSize,
        maxBatches,
        archive,
        schema: schemaName,
        shouldStop: () => stopped,
        onBatch: ({ removed, batches }) => {
          outbox = { removed, batches, archived: archive };
        },
      });
      step = 'ledger';
      ledger =
        ledgerMs === null || stopped
          ? null
          : await pruneLedger(locked.executor, {
              olderThanMs: ledgerMs,
              batchSize: prune.batchSize,
              maxBatches,
              schema: schemaName,
            });
      step = 'dedupe';
      const dedupeKeys = stopped
        ? null
        : await pruneDedupeKeys(locked.executor, {
            batchSize: prune.batchSize,
            maxBatches,
            schema: schemaName,
          });
      return { ran: true, outbox, ledger, dedupeKeys };
    } catch (error) {
      if (!(error instanceof LockTaken)) throw error;
      if (locked.batches() === 0) return { ran: false };
      // Another runner took the lock between two of our batches: it carries on from there.
      return { ran: true, outbox, ledger: step === 'dedupe' ? ledger : null, dedupeKeys: null };
    } finally {
      await session.release(locked.broken());
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

/** The retention lock was taken by another runner when a batch began. */
class LockTaken extends Error {}

/**
 * `executor` with every statement run as a batch of its own: `BEGIN`, the retention lock (see
 * sql/retention.ts), the statement, `COMMIT`. Throws {@link LockTaken} (after `ROLLBACK`) when the
 * lock is taken. `broken()` is true when a `BEGIN` or a `ROLLBACK` failed: the connection may be
 * dead or still inside a transaction, and must not go back to its pool.
 */
function lockedBatches(
  executor: SqlExecutor,
  schema: string,
): { executor: SqlExecutor; batches(): number; broken(): boolean } {
  let batches = 0;
  let broken = false;
  return {
    batches: () => batches,
    broken: () => broken,
    executor: {
      async query<Row>(text: string, values?: readonly unknown[]) {
        await executor.query('BEGIN').catch((error: unknown) => {
          broken = true; // the connection's state is unknown
          throw error;
        });
        try {
          const { rows } = await executor.query<{ locked: boolean }>(tryRetentionLockSql, [schema]);
          if (!rows[0]?.locked) throw new LockTaken();
          const result = await executor.query<Row>(text, values);
          await executor.query('COMMIT');
          batches += 1;
          return result;
        } catch (error) {
          await executor.query('ROLLBACK').catch(() => {
            broken = true;
          });
          throw error;
        }
      },
    },
  };
}
