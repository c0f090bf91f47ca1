import { NOW_MS } from './clock.js';

/**
 * The writer's INSERT (src/stores/mysql/mysql-writer.ts): one multi-row statement for the whole
 * batch, on the caller's transaction. The BEFORE INSERT trigger (schema.ts) takes each row's
 * sequence under the aggregate's row lock, in VALUES order, so a batch's messages of one
 * aggregate keep their input order and a concurrent transaction on that aggregate waits for this
 * one to end (sequence order = commit order).
 *
 * The message id is made by the writer (a UUID v4) and sent, so the rows can be read back by it
 * ({@link insertedSql}): MySQL 8 has no `INSERT ... RETURNING` (MariaDB 10.5+ has), and
 * `LAST_INSERT_ID()` plus the row count assumes consecutive auto-increment ids, which
 * `innodb_autoinc_lock_mode = 2` (MySQL 8's default) does not promise for every statement.
 *
 * Times come from the server's clock (clock.ts): `created_at` from the trigger; `available_at`
 * as the server's now plus the message's delay, or the absolute time a message gives, raised to
 * the server's now when it is earlier (a key below the statement's start could land under the
 * claims' floor, floor.ts; a time in the past is due now either way). Columns per
 * row: message_id, aggregate_id, topic, payload, headers, ordered (1, 0, or NULL: decided by
 * `outbox_unordered_topics`), and the delay or the time.
 */
export function insertMessagesSql(rows: readonly { absolute: boolean }[]): string {
  const values = rows.map(
    (row) =>
      `(?, ?, ?, ?, ?, ?, ${row.absolute ? `GREATEST(?, ${NOW_MS})` : `${NOW_MS} + GREATEST(?, 0)`})`,
  );
  return `INSERT INTO outbox (message_id, aggregate_id, topic, payload, headers, ordered, available_at)
VALUES ${values.join(',\n       ')}`;
}

/** Ids and sequences of the rows just written, by message id (`outbox_message_id_key`). ? list. */
export const insertedSql = `
SELECT id, message_id AS messageId, sequence FROM outbox WHERE message_id IN (?)`;
