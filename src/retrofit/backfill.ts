import { randomUUID } from 'node:crypto';
import type { TransactionRunner } from '../agent/transaction-runner.js';
import { OutboxValidationError } from '../core/errors.js';
import type { JsonValue, OutboxMessage } from '../core/message.js';
import { DEFAULT_LIMITS, validateMessage } from '../core/validate.js';
import {
  beginReadOnlySql,
  closeCursorSql,
  declareBackfillCursorSql,
  fetchSql,
} from '../sql/backfill.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { createOutbox } from '../writer/create-outbox.js';

/** Header every backfilled message carries, so a run can be found (and counted) afterwards. */
export const BACKFILL_HEADER = 'backfill_id';

/** Progress of a backfill, reported after each batch of each pass. */
export interface BackfillProgress {
  phase: 'validate' | 'write';
  /** Rows read (validate) or written (write) so far. */
  rows: number;
  /** Rows the query yields, known once validation finished. */
  total?: number;
}

/** Options of {@link backfill}. */
export interface BackfillOptions {
  /**
   * One connection, outside any transaction: the query runs on it in a read-only transaction
   * that this function opens and closes.
   */
  source: SqlExecutor;
  /** Runs each batch of inserts in its own transaction (e.g. `pgPoolTransactions(pool)`). */
  transactions: TransactionRunner<unknown>;
  /** A single SELECT yielding the columns `aggregate_id` (text) and `payload` (json/jsonb). */
  sql: string;
  /** Topic of every message. */
  topic: string;
  /** Schema of the outbox. Default `public`. */
  schema?: string;
  /** Messages per transaction. Default 500. */
  batchSize?: number;
  /** Refuse (and write nothing) when the query yields more rows than this. Default 10 000. */
  limit?: number;
  /** Validate and count only; write nothing. */
  dryRun?: boolean;
  /** How many rows to return as a preview. Default 5. */
  previewRows?: number;
  /** Write the messages as shadow messages (dispatched without publishing). */
  shadow?: boolean;
  /**
   * Which engine's tables to write (`createOutbox({ engine })`): `'claims'` (default) or
   * `'lanes'`, published by `createLaneDispatcher` / `outbox dispatch --engine lanes`.
   */
  engine?: 'claims' | 'lanes';
  onProgress?: (progress: BackfillProgress) => void;
}

/** What {@link backfill} did (or, in a dry run, would do). */
export interface BackfillResult {
  dryRun: boolean;
  /** Rows the query yielded (all valid). */
  rows: number;
  /** Messages written (0 in a dry run). */
  written: number;
  /** Transactions used to write them. */
  batches: number;
  /** Value of the `backfill_id` header on every message of this run. */
  backfillId: string;
  /** The first rows, as they would be written. */
  preview: { aggregateId: string; payload: JsonValue }[];
}

interface SourceRow {
  aggregateId: string | null;
  payload: JsonValue;
  payloadType: string;
}

const CURSOR = 'agent_outbox_backfill';

/**
 * Enqueues one message per row of an operator's SELECT, through the real writer (same
 * validation, sequences, triggers as any enqueue). Two passes over one snapshot:
 *
 * 1. validate every row and count them; refuse, writing nothing, if any row is invalid or there
 *    are more than `limit`;
 * 2. unless `dryRun`, write them `batchSize` per transaction.
 *
 * A crash during pass 2 leaves the committed batches in place; find them by the `backfill_id`
 * header (`SELECT count(*) FROM outbox WHERE headers->>'backfill_id' = $1`; on the lanes engine
 * `outbox_lane_messages`) before running again.
 *
 * @example
 * ```ts
 * const client = await pool.connect();
 * const result = await backfill({
 *   source: fromPg(client),
 *   transactions: pgPoolTransactions(pool),
 *   sql: `SELECT 'order:' || id AS aggregate_id, jsonb_build_object('orderId', id) AS payload
 *           FROM orders WHERE shipped_at IS NULL ORDER BY id`,
 *   topic: 'order.ship',
 *   dryRun: true,
 * });
 * client.release();
 * ```
 */
export async function backfill(options: BackfillOptions): Promise<BackfillResult> {
  const batchSize = options.batchSize ?? 500;
  const limit = options.limit ?? 10_000;
  const previewRows = options.previewRows ?? 5;
  if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000)
    throw new OutboxValidationError('batchSize', `must be an integer 1..10000, got ${batchSize}`);
  if (!Number.isInteger(limit) || limit < 1)
    throw new OutboxValidationError('limit', `must be a positive integer, got ${limit}`);
  const query = options.sql.replace(/[\s;]+$/, '');
  if (query.trim() === '') throw new OutboxValidationError('sql', 'is empty');
  // Made first: a bad engine or schema is refused before the query runs.
  const writer = createOutbox({
    schema: options.schema,
    captureTraceContext: false,
    engine: options.engine,
  });
  const backfillId = randomUUID();
  const toMessage = (row: SourceRow, n: number): OutboxMessage => {
    if (row.payloadType !== 'json' && row.payloadType !== 'jsonb')
      throw new OutboxValidationError(
        `row ${n}.payload`,
        `must be json or jsonb, got ${row.payloadType} (use to_jsonb(...) or jsonb_build_object(...))`,
      );
    return {
      topic: options.topic,
      aggregateId: row.aggregateId as string,
      payload: row.payload,
      headers: { [BACKFILL_HEADER]: backfillId },
      ...(options.shadow && { shadow: true }),
    };
  };

  const source = options.source;
  await source.query(beginReadOnlySql);
  try {
    // Pass 1: shape, validity and count, before anything is written.
    const preview: BackfillResult['preview'] = [];
    let rows = 0;
    await readAll(source, query, batchSize, (batch) => {
      for (const row of batch) {
        rows++;
        if (rows > limit)
          throw new OutboxValidationError(
            'limit',
            `the query yields more than ${limit} rows; nothing was written (raise the limit, or narrow the query)`,
          );
        const message = toMessage(row, rows);
        validateMessage(message, DEFAULT_LIMITS, `row ${rows}`);
        if (preview.length < previewRows)
          preview.push({ aggregateId: message.aggregateId, payload: message.payload });
      }
      options.onProgress?.({ phase: 'validate', rows });
      return Promise.resolve();
    });
    const result: BackfillResult = {
      dryRun: options.dryRun === true,
      rows,
      written: 0,
      batches: 0,
      backfillId,
      preview,
    };
    if (options.dryRun) return result;

    // Pass 2: the same snapshot, written batch by batch.
    let n = 0;
    await readAll(source, query, batchSize, async (batch) => {
      const messages = batch.map((row) => toMessage(row, ++n));
      await options.transactions.run((tx) => writer.enqueue(tx, messages));
      result.written += messages.length;
      result.batches++;
      options.onProgress?.({ phase: 'write', rows: result.written, total: rows });
    });
    return result;
  } catch (error) {
    throw explain(error);
  } finally {
    // Read-only: nothing to undo; COMMIT and ROLLBACK end it alike.
    await source.query('ROLLBACK').catch(() => undefined);
  }
}

async function readAll(
  source: SqlExecutor,
  query: string,
  batchSize: number,
  onBatch: (rows: SourceRow[]) => Promise<void>,
): Promise<void> {
  await source.query(declareBackfillCursorSql(CURSOR, query));
  for (;;) {
    const { rows } = await source.query<SourceRow>(fetchSql(CURSOR, batchSize));
    if (rows.length > 0) await onBatch(rows);
    if (rows.length < batchSize) break;
  }
  await source.query(closeCursorSql(CURSOR));
}

/** Turns the server's refusals into what the operator should change. */
function explain(error: unknown): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : String(error);
  if (code === '25006' || (code === '0A000' && /data-modifying/.test(message)))
    return new OutboxValidationError('sql', `must only read: ${message} (it runs read-only)`);
  if (code === '42703')
    return new OutboxValidationError(
      'sql',
      `must yield the columns aggregate_id and payload: ${message}`,
    );
  if (code === '42601')
    return new OutboxValidationError('sql', `must be one SELECT statement: ${message}`);
  return error;
}
