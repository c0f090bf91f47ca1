import { quoteIdentifier } from '../core/identifier.js';
import type { EnqueuedMessage } from '../core/message.js';
import type { ValidMessage } from '../core/validate.js';
import { admitLaneDedupeKeysSql, dedupeSavepointSql, firstOfKeysSql } from '../sql/dedupe.js';
import { insertKeyedLaneMessagesSql, insertLaneMessagesSql } from '../sql/lanes.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { preparable } from '../store/statement-name.js';
import { byAggregate, inInputOrder, type InsertedRow } from './inserted-rows.js';
import { byKey, firstOfDropped, keyedResults, splitByKey } from './keyed-results.js';

/** What {@link insertLaneMessages} needs from the writer. */
export interface LaneInsertSettings {
  schema: string;
  dedupeWindowMs: number;
  /** `onDuplicate: 'reject'`: throw on a duplicate and write nothing of the call. */
  reject: boolean;
}

const statements = new Map<
  string,
  { insert: string; keyed: string; admit: string; firstOf: string }
>();
function sqlOf(schema: string) {
  let sql = statements.get(schema);
  if (!sql) {
    const quoted = quoteIdentifier(schema);
    sql = {
      insert: preparable(insertLaneMessagesSql(quoted)),
      keyed: preparable(insertKeyedLaneMessagesSql(quoted)),
      admit: preparable(admitLaneDedupeKeysSql(quoted)),
      firstOf: firstOfKeysSql(quoted),
    };
    statements.set(schema, sql);
  }
  return sql;
}

type Json = (message: ValidMessage, index: number) => string;

/**
 * The lanes writer (createOutbox({ engine: 'lanes' })): a batch without dedupe keys is one
 * statement (sql/lanes.ts `insertLaneMessagesSql`). With keys, their admission comes first
 * (sql/dedupe.ts `admitLaneDedupeKeysSql`), and only the admitted keys' messages are written,
 * with the same results as the claim engine's writer (keyed-insert.ts): a duplicate is answered
 * with the first message of its key and `deduped: true`, or, under `reject`, nothing of the call
 * is written and `OutboxDuplicateError` is thrown. A message repeating an earlier message's key
 * within the same call is not written: it is answered with that one.
 */
export async function insertLaneMessages(
  executor: SqlExecutor,
  valid: readonly ValidMessage[],
  json: Json,
  settings: LaneInsertSettings,
): Promise<EnqueuedMessage[]> {
  const sql = sqlOf(settings.schema);
  if (valid.every((m) => m.dedupeKey === undefined)) {
    const rows = await insertRows(
      executor,
      sql.insert,
      valid.map((message, index) => ({
        aggregateId: message.aggregateId,
        json: json(message, index),
      })),
    );
    return inInputOrder(valid, rows);
  }

  const call = splitByKey(valid, settings.reject);
  const { firstWithKey, sent } = call;
  // Sorted by key: two writers of the same keys take their locks in one order.
  const keys = [...firstWithKey.keys()].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0));
  const admission = `[${keys
    .map((key) => {
      const m = valid[firstWithKey.get(key)!]!;
      return `{"k":${JSON.stringify(key)},"t":${JSON.stringify(m.topic)},"a":${JSON.stringify(m.aggregateId)}}`;
    })
    .join(',')}]`;
  if (settings.reject) await executor.query(dedupeSavepointSql);
  const { rows: admitted } = await executor.query<{ dedupeKey: string; messageId: string }>(
    sql.admit,
    [admission, settings.dedupeWindowMs],
  );
  const messageIdOf = new Map(admitted.map((row) => [row.dedupeKey, row.messageId]));
  const dropped = keys.filter((key) => !messageIdOf.has(key));

  // A statement of its own, after the admission: under READ COMMITTED it sees a key that a
  // concurrent transaction committed while the admission waited on it (sql/dedupe.ts).
  const first = await firstOfDropped(
    executor,
    sql.firstOf,
    dropped,
    settings.reject,
    'neither admitted nor found in outbox_dedupe_keys',
  );

  const writing = sent.filter((index) => {
    const key = valid[index]!.dedupeKey;
    return key === undefined || messageIdOf.has(key);
  });
  const rows = await insertRows(
    executor,
    sql.keyed,
    writing.map((index) => {
      const message = valid[index]!;
      const messageId =
        message.dedupeKey === undefined ? undefined : messageIdOf.get(message.dedupeKey);
      const text = json(message, index);
      return {
        aggregateId: message.aggregateId,
        json: messageId === undefined ? text : `{"mi":"${messageId}",${text.slice(1)}`,
      };
    }),
  );
  const { written, keyless } = byKey(rows as (InsertedRow & { dedupeKey: string | null })[]);
  return keyedResults(valid, call, written, keyless, first);
}

/** One INSERT of `batch` (sorted here by aggregate), or none when it is empty. */
async function insertRows(
  executor: SqlExecutor,
  sql: string,
  batch: { aggregateId: string; json: string }[],
): Promise<InsertedRow[]> {
  if (batch.length === 0) return [];
  // One global lock order for the aggregates' sequence counters (see insert-messages.ts).
  // Array.prototype.sort is stable: positions within an aggregate keep the caller's order.
  if (batch.length > 1) batch.sort(byAggregate);
  const { rows } = await executor.query<InsertedRow>(sql, [
    `[${withAggregateCounts(batch).join(',')}]`,
  ]);
  if (rows.length !== batch.length)
    throw new Error(
      `agent-outbox: inserted ${rows.length} rows for ${batch.length} messages; is a trigger or rule on outbox_lane_messages dropping rows?`,
    );
  return rows;
}

/**
 * The lanes writer's rows with their aggregate's counts (sql/lanes.ts `insertLaneMessagesSql`):
 * `r`, how many messages of the aggregate follow the row in the batch, and `n`, on its first
 * row, how many it has. `batch` is sorted by aggregate.
 */
function withAggregateCounts(batch: readonly { aggregateId: string; json: string }[]): string[] {
  const out: string[] = [];
  for (let start = 0; start < batch.length;) {
    let end = start + 1;
    while (end < batch.length && batch[end]!.aggregateId === batch[start]!.aggregateId) end++;
    for (let i = start; i < end; i++) {
      const counts = i === start ? `"r":${end - 1 - i},"n":${end - start}` : `"r":${end - 1 - i}`;
      out.push(`{${counts},${batch[i]!.json.slice(1)}`);
    }
    start = end;
  }
  return out;
}
