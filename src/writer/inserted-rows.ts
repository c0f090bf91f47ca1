import type { EnqueuedMessage } from '../core/message.js';
import type { ValidMessage } from '../core/validate.js';

/** A row the writer's INSERT returns (sql/insert-messages.ts). */
export interface InsertedRow {
  id: string;
  messageId: string;
  sequence: string;
  topic: string;
  aggregateId: string;
}

/**
 * One global lock order for the aggregates' sequence counters (see insert-messages.ts): sort a
 * batch with this. Array.prototype.sort is stable: positions within an aggregate keep the
 * caller's order. Code-unit order, not a collation's.
 */
export const byAggregate = (x: { aggregateId: string }, y: { aggregateId: string }): number =>
  x.aggregateId < y.aggregateId ? -1 : x.aggregateId > y.aggregateId ? 1 : 0;

/**
 * The statement returns rows grouped by aggregate (see insert-messages.ts). Within an aggregate
 * sequences follow input positions, so the k-th input message of an aggregate is its k-th
 * returned row by sequence.
 */
export function inInputOrder(
  valid: readonly ValidMessage[],
  rows: readonly InsertedRow[],
): EnqueuedMessage[] {
  const byAggregate = new Map<string, EnqueuedMessage[]>();
  for (const row of rows) {
    const list = byAggregate.get(row.aggregateId) ?? [];
    list.push(resultOf(row));
    byAggregate.set(row.aggregateId, list);
  }
  for (const list of byAggregate.values()) list.sort((a, b) => a.sequence - b.sequence);
  const cursor = new Map<string, number>();
  return valid.map((message) => {
    const index = cursor.get(message.aggregateId) ?? 0;
    cursor.set(message.aggregateId, index + 1);
    const row = byAggregate.get(message.aggregateId)?.[index];
    if (!row)
      throw new Error(
        `agent-outbox: no inserted row returned for aggregate ${message.aggregateId}`,
      );
    return message.approval ? { ...row, awaitingApproval: true } : row;
  });
}

/** A written row as the writer returns it (with its key, when it has one). */
export function resultOf(row: InsertedRow, dedupeKey?: string): EnqueuedMessage {
  const result: EnqueuedMessage = {
    id: String(row.id),
    messageId: row.messageId,
    sequence: Number(row.sequence),
    topic: row.topic,
    aggregateId: row.aggregateId,
    deduped: false,
  };
  if (dedupeKey !== undefined) result.dedupeKey = dedupeKey;
  return result;
}
