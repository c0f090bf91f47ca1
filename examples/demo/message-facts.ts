/**
 * Every outbox message of the demo's database and what became of it, on either engine: the rows
 * are listed from the engine's own table (so a row the tools did not report, such as one a failed
 * call left behind, is seen), and their fate is read through `readEffectStatus`, the call an
 * agent's status tool makes — not from the demo's own counters.
 */
import {
  readDatabaseEngine,
  readEffectStatus,
  type EffectStatus,
  type SqlExecutor,
} from '../../src/index.js';

/** One outbox row as the report reads it (both demos: SQLite's reads its own). */
export interface MessageFact {
  id: string;
  topic: string;
  aggregate_id: string;
  /** The message's `traceparent` header, or null. */
  traceparent: string | null;
  dispatched: boolean;
  dead: boolean;
}

/** A message with its status as `readEffectStatus` reads it (approval decision included). */
export interface MessageStatusFact extends MessageFact {
  status: EffectStatus;
}

/** Reads every message of the `public` schema, oldest first. */
export async function readMessageFacts(executor: SqlExecutor): Promise<MessageStatusFact[]> {
  const table =
    (await readDatabaseEngine(executor)) === 'lanes' ? 'outbox_lane_messages' : 'outbox_messages';
  const { rows } = await executor.query<Omit<MessageFact, 'dispatched' | 'dead' | 'status'>>(
    `SELECT message_id::text AS id, topic, aggregate_id, headers->>'traceparent' AS traceparent
       FROM ${table} ORDER BY id`,
  );
  if (rows.length === 0) return [];
  const { effects } = await readEffectStatus(executor, {
    messageIds: rows.map((r) => r.id),
    limit: rows.length,
  });
  return rows.map((row, i) => {
    const status = effects[i]!;
    return {
      ...row,
      dispatched: status.state === 'published' || status.state === 'performed',
      dead: status.state === 'dead',
      status,
    };
  });
}

/**
 * How many messages a dispatcher can still get to: not those held for a person, nor those of
 * an aggregate that has one waiting (ordered behind it, they go once a person decides).
 */
export function dispatchableCount(messages: readonly MessageStatusFact[]): number {
  const held = new Set(
    messages.filter((m) => m.status.state === 'awaiting approval').map((m) => m.aggregate_id),
  );
  return messages.filter(
    (m) =>
      (m.status.state === 'pending' || m.status.state === 'failed') && !held.has(m.aggregate_id),
  ).length;
}
