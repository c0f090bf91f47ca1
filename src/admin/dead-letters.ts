import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { globToLike } from '../dispatcher/topic-patterns.js';
import { listDeadSql, replaySql } from '../sql/dead-letters.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** One dead-lettered message. */
export interface DeadLetter {
  id: string;
  messageId: string;
  topic: string;
  aggregateId: string;
  sequence: number;
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  deadLetteredAt: Date;
}

/** Lists dead letters, oldest first. `topic` is a glob (`payment.*`). */
export async function listDeadLetters(
  executor: SqlExecutor,
  options: { schema?: string; topic?: string; limit?: number } = {},
): Promise<DeadLetter[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<DeadLetter & { sequence: string }>(listDeadSql(schema), [
    options.topic ? globToLike(options.topic) : null,
    options.limit ?? 100,
  ]);
  return rows.map((r) => ({
    ...r,
    id: String(r.id),
    sequence: Number(r.sequence),
    attempts: Number(r.attempts),
    createdAt: new Date(r.createdAt),
    deadLetteredAt: new Date(r.deadLetteredAt),
  }));
}

/** Which dead letters to replay: ids (row ids or message ids), or all of them (optionally by topic). */
export type ReplaySelection =
  { ids: readonly string[]; topic?: string } | { allDead: true; topic?: string };

const ROW_ID = /^[0-9]{1,19}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * A {@link ReplaySelection} checked and split, for every store's replay: row ids (digits),
 * message ids (UUIDs, lower case), or `all`. Throws `OutboxValidationError` on an id that is
 * neither, or on an empty list.
 */
export function parseReplaySelection(selection: ReplaySelection): {
  rowIds: string[];
  messageIds: string[];
  all: boolean;
} {
  const rowIds: string[] = [];
  const messageIds: string[] = [];
  const all = 'allDead' in selection && selection.allDead === true;
  if (!all) {
    const ids = 'ids' in selection ? selection.ids : [];
    if (ids.length === 0)
      throw new OutboxValidationError('ids', 'give at least one id, or select all dead letters');
    for (const id of ids) {
      if (ROW_ID.test(id)) rowIds.push(id);
      else if (UUID.test(id)) messageIds.push(id.toLowerCase());
      else
        throw new OutboxValidationError(
          'ids',
          `"${id}" is neither a row id (digits) nor a message id (UUID)`,
        );
    }
  }
  return { rowIds, messageIds, all };
}

/**
 * Makes dead letters pending again (attempts 0, due now, same message id). Returns what was
 * replayed; ids that are not dead letters are ignored (see the returned list).
 */
export async function replayDeadLetters(
  executor: SqlExecutor,
  selection: ReplaySelection,
  options: { schema?: string } = {},
): Promise<{ id: string; messageId: string; topic: string }[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rowIds, messageIds, all } = parseReplaySelection(selection);
  const { rows } = await executor.query<{ id: string; messageId: string; topic: string }>(
    replaySql(schema),
    [rowIds, messageIds, all, selection.topic ? globToLike(selection.topic) : null],
  );
  return rows.map((r) => ({ ...r, id: String(r.id) }));
}
