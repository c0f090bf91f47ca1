import { OutboxDuplicateError, OutboxValidationError } from '../core/errors.js';
import type { EnqueuedMessage } from '../core/message.js';
import type { ValidMessage } from '../core/validate.js';
import { dedupeReleaseSql, dedupeRollbackSql } from '../sql/dedupe.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { inInputOrder, resultOf, type InsertedRow } from './inserted-rows.js';

/**
 * What the two keyed writers share (keyed-insert.ts on the claim engine, lane-insert.ts on
 * lanes): which messages of a call are sent, how a duplicate is answered, and the results in the
 * caller's order. Only the statements differ between the engines.
 */

/** A call's messages split by key: the first message with a key stands for the later ones. */
export interface KeyedCall {
  /** Each key's first message, as its index in the call. */
  firstWithKey: Map<string, number>;
  /** The indexes of the messages to write: every keyless one and each key's first. */
  sent: number[];
}

/**
 * Splits a call; under `reject` a key repeated within the call is refused before anything is
 * written (every key of a rejecting call must differ).
 */
export function splitByKey(valid: readonly ValidMessage[], reject: boolean): KeyedCall {
  const firstWithKey = new Map<string, number>();
  const sent: number[] = [];
  valid.forEach((message, index) => {
    const key = message.dedupeKey;
    if (key === undefined) return sent.push(index);
    const first = firstWithKey.get(key);
    if (first === undefined) {
      firstWithKey.set(key, index);
      return sent.push(index);
    }
    if (reject)
      throw new OutboxValidationError(
        `messages[${index}].dedupeKey`,
        `repeats the key of messages[${first}] in the same call; with onDuplicate: 'reject' every key of a call must differ`,
      );
  });
  return { firstWithKey, sent };
}

/**
 * The first messages of the keys that were not written (`dropped`: live keys of earlier calls),
 * read with `firstOfSql` (sql/dedupe.ts `firstOfKeysSql`), each answered with `deduped: true`.
 * Under `reject` the caller's savepoint (taken before the keyed statement) is rolled back when a
 * key was dropped, else released, and the first duplicate is thrown as
 * {@link OutboxDuplicateError}. `missing` says in the error where a key that is neither written nor
 * found went: it means something outside the library dropped a row.
 */
export async function firstOfDropped(
  executor: SqlExecutor,
  firstOfSql: string,
  dropped: readonly string[],
  reject: boolean,
  missing: string,
): Promise<Map<string, EnqueuedMessage>> {
  if (reject) await executor.query(dropped.length > 0 ? dedupeRollbackSql : dedupeReleaseSql);
  const first = new Map<string, EnqueuedMessage>();
  if (dropped.length === 0) return first;
  const { rows } = await executor.query<InsertedRow & { dedupeKey: string }>(firstOfSql, [
    JSON.stringify(dropped),
  ]);
  for (const row of rows)
    first.set(row.dedupeKey, { ...resultOf(row, row.dedupeKey), deduped: true });
  const lost = dropped.find((key) => !first.has(key));
  if (lost !== undefined)
    throw new Error(
      `agent-outbox: the message with dedupeKey ${JSON.stringify(lost)} was ${missing}`,
    );
  if (reject) {
    const key = dropped[0]!;
    throw new OutboxDuplicateError(key, first.get(key)!.messageId);
  }
  return first;
}

/** A keyed statement's returned rows, by key (`written`) and the keyless ones in order. */
export function byKey(rows: readonly (InsertedRow & { dedupeKey: string | null })[]): {
  written: Map<string, InsertedRow>;
  keyless: InsertedRow[];
} {
  const written = new Map<string, InsertedRow>();
  const keyless: InsertedRow[] = [];
  for (const row of rows) {
    if (row.dedupeKey === null) keyless.push(row);
    else written.set(row.dedupeKey, row);
  }
  return { written, keyless };
}

/**
 * The results of a keyed call in the caller's order: a keyless message its row (`keyless`, as
 * the statement returned them), a key's first message the row written for it (`written`) or,
 * for a key live before the call, that key's first message (`first`); a later message of the
 * same key in the call repeats its first's result with `deduped: true`.
 */
export function keyedResults(
  valid: readonly ValidMessage[],
  call: KeyedCall,
  written: ReadonlyMap<string, InsertedRow>,
  keyless: readonly InsertedRow[],
  first: ReadonlyMap<string, EnqueuedMessage>,
): EnqueuedMessage[] {
  const keylessValid = call.sent
    .filter((i) => valid[i]!.dedupeKey === undefined)
    .map((i) => valid[i]!);
  const keylessResults = inInputOrder(keylessValid, keyless);
  let nextKeyless = 0;
  return valid.map((message) => {
    const key = message.dedupeKey;
    if (key === undefined) return keylessResults[nextKeyless++]!;
    const row = written.get(key);
    if (!row) return first.get(key)!;
    if (valid[call.firstWithKey.get(key)!] !== message)
      return { ...resultOf(row, key), deduped: true };
    const found = resultOf(row, key);
    return message.approval ? { ...found, awaitingApproval: true } : found;
  });
}
