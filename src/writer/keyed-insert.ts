import { OutboxValidationError } from '../core/errors.js';
import { quoteIdentifier } from '../core/identifier.js';
import type { EnqueuedMessage } from '../core/message.js';
import type { ValidMessage } from '../core/validate.js';
import { dedupeSavepointSql, firstOfKeysSql } from '../sql/dedupe.js';
import { insertKeyedMessagesSql } from '../sql/insert-messages.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { preparable } from '../store/statement-name.js';
import { byAggregate, type InsertedRow } from './inserted-rows.js';
import { byKey, firstOfDropped, keyedResults, splitByKey } from './keyed-results.js';

/** Default `dedupeWindowMs`: 30 days. */
export const DEFAULT_DEDUPE_WINDOW_MS = 30 * 24 * 60 * 60 * 1000;
/** Longest window accepted: about ten years (as an approval's expiry). */
const MAX_DEDUPE_WINDOW_MS = 10 * 366 * 86_400_000;

/** The writer's `dedupeWindowMs`, checked once. */
export function resolveDedupeWindowMs(value: number | undefined): number {
  if (value === undefined) return DEFAULT_DEDUPE_WINDOW_MS;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1)
    throw new OutboxValidationError(
      'dedupeWindowMs',
      `must be a positive integer of milliseconds, got ${String(value)}`,
    );
  if (value > MAX_DEDUPE_WINDOW_MS)
    throw new OutboxValidationError('dedupeWindowMs', 'must be at most ten years');
  return value;
}

/** What {@link insertKeyed} needs from the writer. */
export interface KeyedInsertSettings {
  schema: string;
  dedupeWindowMs: number;
  /** `onDuplicate: 'reject'`: throw on a duplicate and write nothing of the call. */
  reject: boolean;
}

const statements = new Map<string, { insert: string; firstOf: string }>();
function sqlOf(schema: string) {
  let sql = statements.get(schema);
  if (!sql) {
    const quoted = quoteIdentifier(schema);
    sql = { insert: preparable(insertKeyedMessagesSql(quoted)), firstOf: firstOfKeysSql(quoted) };
    statements.set(schema, sql);
  }
  return sql;
}

/**
 * Inserts a batch in which some messages have a `dedupeKey` (migration 013). A message repeating
 * an earlier message's key within the same call is not sent: it is answered with that one. The
 * trigger drops every row whose key is live; the statement returns the written rows with their
 * keys, so a keyed message without a returned row was a duplicate, and one more statement (only
 * then) reads the first messages of those keys.
 */
export async function insertKeyed(
  executor: SqlExecutor,
  valid: readonly ValidMessage[],
  json: (message: ValidMessage, index: number) => string,
  settings: KeyedInsertSettings,
): Promise<EnqueuedMessage[]> {
  const sql = sqlOf(settings.schema);
  const call = splitByKey(valid, settings.reject);
  const batch = call.sent.map((index) => ({
    index,
    aggregateId: valid[index]!.aggregateId,
    json: json(valid[index]!, index),
  }));
  if (batch.length > 1) batch.sort(byAggregate);
  const params = [`[${batch.map((row) => row.json).join(',')}]`, settings.dedupeWindowMs];

  if (settings.reject) await executor.query(dedupeSavepointSql);
  const { rows } = await executor.query<InsertedRow & { dedupeKey: string | null }>(
    sql.insert,
    params,
  );
  const { written, keyless } = byKey(rows);
  const dropped = [...call.firstWithKey.keys()].filter((key) => !written.has(key));
  const first = await firstOfDropped(
    executor,
    sql.firstOf,
    dropped,
    settings.reject,
    'neither written nor found in outbox_dedupe_keys; is a trigger or rule on the outbox table dropping rows?',
  );
  return keyedResults(valid, call, written, keyless, first);
}
