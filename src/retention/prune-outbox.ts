import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { OutboxValidationError } from '../core/errors.js';
import {
  archiveDispatchedBatchSql,
  countPrunableLedgerSql,
  countPrunableSql,
  pruneDispatchedBatchSql,
} from '../sql/retention.js';
import { countExpiredDedupeKeysSql } from '../sql/dedupe.js';
import { pruneRingSql } from '../sql/dispatched-log.js';
import { pruneLaneApprovalsSql } from '../sql/lane-approvals.js';
import { lanePruneArchiveSql } from '../sql/lane-archive.js';
import { countLanePrunableSql } from '../sql/lanes.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** Default outbox retention: dispatched rows older than 30 days (SPEC §4.9). */
export const DEFAULT_OUTBOX_RETENTION_MS = 30 * 24 * 60 * 60 * 1000;

/** Progress of a long prune, reported after every batch. */
export interface PruneProgress {
  /** Rows removed from `outbox` so far (deleted or archived). */
  removed: number;
  /** Batches run so far (each its own transaction). */
  batches: number;
  /** Rows in the batch that just finished (at most `batchSize`). */
  lastBatch: number;
}

/** Options of {@link pruneOutbox}. */
export interface PruneOutboxOptions {
  /** Dispatched rows older than this (by `dispatched_at`) go. Default 30 days. */
  olderThanMs?: number;
  /**
   * Move rows to `outbox_archive` (lanes engine: `outbox_lane_archive`, migration 033) instead of
   * deleting them. Default false.
   */
  archive?: boolean;
  /** Rows per batch (per transaction). Default 1000. */
  batchSize?: number;
  /** Stop after this many batches; the next run continues. Default unlimited. */
  maxBatches?: number;
  /** Schema of the outbox. Default `public`. */
  schema?: string;
  /** Called after each batch, e.g. to print progress or to count batch sizes. */
  onBatch?: (progress: PruneProgress) => void;
  /** Checked before each batch: return true to stop early (shutdown). */
  shouldStop?: () => boolean;
}

/** What {@link pruneOutbox} removed. */
export interface PruneOutboxResult {
  removed: number;
  batches: number;
  archived: boolean;
}

/** Checks and fills in {@link PruneOutboxOptions}. */
export function resolvePruneOptions(options: PruneOutboxOptions): {
  olderThanMs: number;
  batchSize: number;
  maxBatches: number;
  schema: string;
} {
  const olderThanMs = options.olderThanMs ?? DEFAULT_OUTBOX_RETENTION_MS;
  const batchSize = options.batchSize ?? 1000;
  const maxBatches = options.maxBatches ?? Infinity;
  if (typeof olderThanMs !== 'number' || !(olderThanMs >= 0) || !Number.isFinite(olderThanMs))
    throw new OutboxValidationError(
      'olderThanMs',
      `must be a finite number >= 0, got ${olderThanMs}`,
    );
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 100_000)
    throw new OutboxValidationError('batchSize', `must be an integer 1..100000, got ${batchSize}`);
  if (maxBatches !== Infinity && (!Number.isInteger(maxBatches) || maxBatches < 1))
    throw new OutboxValidationError('maxBatches', `must be a positive integer, got ${maxBatches}`);
  return {
    olderThanMs,
    batchSize,
    maxBatches,
    schema: quoteIdentifier(options.schema ?? DEFAULT_SCHEMA),
  };
}

/**
 * Deletes (or archives) dispatched messages older than `olderThanMs`. Those in the dispatched ring
 * (migration 018) go a whole table at a time, each kept between `olderThanMs` and about one and a
 * half times that (sql/dispatched-log.ts); rows dispatched before migration 018 are deleted from
 * `outbox`, `batchSize` rows per statement, each statement its own transaction, until none is
 * left (or `maxBatches`). Pending
 * and dead-lettered rows are never touched. Pass a Pool-backed executor (`fromPg(pool)`) or a
 * dedicated connection outside any transaction: inside one, the batches would share its locks.
 *
 * @example
 * ```ts
 * const { removed } = await pruneOutbox(fromPg(pool), { olderThanMs: 30 * 86_400_000 });
 * ```
 */
export async function pruneOutbox(
  executor: SqlExecutor,
  options: PruneOutboxOptions = {},
): Promise<PruneOutboxResult> {
  const { olderThanMs, batchSize, maxBatches, schema } = resolvePruneOptions(options);
  const archive = options.archive ?? false;
  const sql = archive ? archiveDispatchedBatchSql(schema) : pruneDispatchedBatchSql(schema);
  let removed = 0;
  let batches = 0;
  // The dispatched ring (migration 018) first: whole tables at once (sql/dispatched-log.ts).
  const ring = await executor.query<{ n: number }>(pruneRingSql(schema), [
    olderThanMs,
    archive,
    false,
  ]);
  const ringRows = Number(ring.rows[0]?.n ?? 0);
  if (ringRows > 0) {
    removed += ringRows;
    batches += 1;
    options.onBatch?.({ removed, batches, lastBatch: ringRows });
  }
  // Then rows dispatched before migration 018, still in `outbox`, by batches.
  while (batches < maxBatches && !options.shouldStop?.()) {
    const { rows } = await executor.query<{ n: number }>(sql, [olderThanMs, batchSize]);
    const n = Number(rows[0]?.n ?? 0);
    batches += 1;
    removed += n;
    options.onBatch?.({ removed, batches, lastBatch: n });
    if (n < batchSize) break;
  }
  // The lanes engine's consumed messages (migration 024): deleted, or moved to
  // `outbox_lane_archive` (migration 033; each lane records the choice for the parked messages
  // it passes, so a deleting prune goes through the same function).
  while (batches < maxBatches && !options.shouldStop?.()) {
    const { rows } = await executor.query<{ n: string | number }>(lanePruneArchiveSql(schema), [
      olderThanMs,
      batchSize,
      archive,
    ]);
    const n = Number(rows[0]?.n ?? 0);
    if (n === 0) break;
    batches += 1;
    removed += n;
    options.onBatch?.({ removed, batches, lastBatch: n });
  }
  // The decisions of held lane messages retention deleted (migration 027; an archived message
  // keeps its decision in its archive row): not counted in `removed`, which counts messages.
  await executor.query(pruneLaneApprovalsSql(schema), [olderThanMs]);
  return { removed, batches, archived: archive };
}

/** What a prune would remove now (dry run). */
export interface PrunePreview {
  /**
   * Dispatched outbox rows older than the cut-off, and the lanes engine's consumed messages
   * written before it (migration 024).
   */
  outboxRows: number;
  /** `dispatched_at` of the oldest of them (a lane message's `created_at`), or null. */
  oldestDispatchedAt: Date | null;
  /** Done ledger rows older than the ledger cut-off (when asked for). */
  ledgerRows?: number;
  /** Expired dedupe keys (migration 013), which a prune deletes too. */
  dedupeKeys: number;
}

/**
 * Counts what {@link pruneOutbox} (and, with `ledgerOlderThanMs`, pruneLedger) would remove, and
 * the expired dedupe keys `outbox prune` deletes with them.
 */
export async function previewPrune(
  executor: SqlExecutor,
  options: { olderThanMs?: number; ledgerOlderThanMs?: number; schema?: string } = {},
): Promise<PrunePreview> {
  const { olderThanMs, schema } = resolvePruneOptions(options);
  const { rows } = await executor.query<{ n: number; oldest: Date | string | null }>(
    countPrunableSql(schema),
    [olderThanMs],
  );
  const ring = await executor.query<{ n: number; oldest: Date | string | null }>(
    pruneRingSql(schema),
    [olderThanMs, false, true],
  );
  const keys = await executor.query<{ n: number }>(countExpiredDedupeKeysSql(schema));
  const lanes = await executor.query<{ n: string; oldest: Date | string | null }>(
    countLanePrunableSql(schema),
    [olderThanMs],
  );
  const oldest = [rows[0]?.oldest, ring.rows[0]?.oldest, lanes.rows[0]?.oldest]
    .filter((d): d is Date | string => d !== null && d !== undefined)
    .map((d) => new Date(d))
    .sort((a, b) => a.getTime() - b.getTime())[0];
  const preview: PrunePreview = {
    outboxRows:
      Number(rows[0]?.n ?? 0) + Number(ring.rows[0]?.n ?? 0) + Number(lanes.rows[0]?.n ?? 0),
    oldestDispatchedAt: oldest ?? null,
    dedupeKeys: Number(keys.rows[0]?.n ?? 0),
  };
  if (options.ledgerOlderThanMs !== undefined) {
    const ledger = await executor.query<{ n: number }>(countPrunableLedgerSql(schema), [
      options.ledgerOlderThanMs,
    ]);
    preview.ledgerRows = Number(ledger.rows[0]?.n ?? 0);
  }
  return preview;
}
