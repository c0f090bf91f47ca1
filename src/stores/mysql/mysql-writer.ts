import { OutboxAutocommitError, OutboxValidationError } from '../../core/errors.js';
import type { EnqueuedMessage, OutboxMessage } from '../../core/message.js';
import { messageRows, type MessageRowOptions } from '../../core/message-rows.js';
import { insertedSql, insertMessagesSql } from '../../sql/mysql/enqueue.js';
import { AUTOCOMMIT_OPT_IN } from '../../store/sql-executor.js';
import { execute, selectRows, SERVER_STATUS, type MysqlQueryable } from './mysql-connection.js';

/** Options of {@link createMysqlOutbox}: limits, default headers, the default schema version. */
export type MysqlOutboxOptions = MessageRowOptions;

/** Per-call options of {@link MysqlOutboxWriter.enqueue}. */
export interface MysqlEnqueueOptions {
  /**
   * Write even when the connection is not inside a transaction: each message then commits by
   * itself, apart from any business rows — a lone message, on purpose. Default false: such a
   * call throws `OutboxAutocommitError` and writes nothing.
   */
  allowAutocommit?: boolean;
}

/** Writes messages on the caller's MySQL transaction. Create with {@link createMysqlOutbox}. */
export interface MysqlOutboxWriter {
  /**
   * Validates and inserts messages on `connection` (a mysql2 promise connection inside the
   * caller's transaction: after `beginTransaction()`, or with autocommit off). Nothing is written
   * when any message is invalid; an empty array writes nothing. A connection in autocommit mode
   * is refused with `OutboxAutocommitError` unless `options.allowAutocommit` is set. The rows
   * become visible to dispatchers when the caller commits, and vanish if it rolls back.
   */
  enqueue(
    connection: MysqlQueryable,
    message: OutboxMessage,
    options?: MysqlEnqueueOptions,
  ): Promise<EnqueuedMessage>;
  enqueue(
    connection: MysqlQueryable,
    messages: readonly OutboxMessage[],
    options?: MysqlEnqueueOptions,
  ): Promise<EnqueuedMessage[]>;
}

const OUTSIDE_TRANSACTION =
  'The mysql2 connection is in autocommit mode: the insert would commit by itself. Call enqueue() between `await connection.beginTransaction()` and `await connection.commit()`, on the connection that writes your business rows (not on a pool: a pool runs each query on any connection).';

/**
 * Creates the MySQL/MariaDB writer: the same message shape, validation and errors as the
 * Postgres and SQLite writers. The messages of one call go in one INSERT on the caller's
 * connection; the table's trigger takes each one's sequence under its aggregate's row lock, so
 * sequence order is commit order (src/sql/mysql/schema.ts). Not supported here (refused, not
 * ignored): `dedupeKey`, `requiresApproval`, `shadow`.
 *
 * @example
 * ```ts
 * const outbox = createMysqlOutbox();
 * const connection = await mysql.createConnection('mysql://root@127.0.0.1:3306/app');
 * await connection.beginTransaction();
 * await connection.query('INSERT INTO orders (id, total) VALUES (?, ?)', ['42', 1200]);
 * await outbox.enqueue(connection, {
 *   topic: 'payment.charge',
 *   aggregateId: 'order:42',
 *   payload: { orderId: '42', amount: 1200 },
 * });
 * await connection.commit();
 * ```
 */
export function createMysqlOutbox(options: MysqlOutboxOptions = {}): MysqlOutboxWriter {
  async function enqueueMany(
    connection: MysqlQueryable,
    messages: readonly OutboxMessage[],
    allowAutocommit: boolean,
  ): Promise<EnqueuedMessage[]> {
    if (typeof connection?.query !== 'function')
      throw new OutboxValidationError(
        'connection',
        'must be a mysql2 promise connection inside a transaction',
      );
    if (!Array.isArray(messages))
      throw new OutboxValidationError('messages', 'must be a message object or an array of them');
    // Validate before any round trip: bad input writes nothing and costs nothing.
    const rows = messageRows(messages, options, Date.now(), 'MySQL outbox');
    // The OK packet's status flags say whether the session is in a transaction; `DO 0` is the
    // cheapest statement that returns one. Checked before the empty-batch shortcut: a call
    // outside a transaction is a mistake whatever it holds.
    const adapterReason = connection.outsideTransaction?.();
    if (!allowAutocommit && adapterReason !== undefined)
      throw new OutboxAutocommitError(
        `agent-outbox: enqueue() refused to write outside a transaction, and wrote nothing. ${adapterReason} ${AUTOCOMMIT_OPT_IN}`,
      );
    if (!allowAutocommit && connection.outsideTransaction === undefined) {
      const { serverStatus } = await execute(connection, 'DO 0');
      if (serverStatus === undefined)
        throw new OutboxValidationError(
          'connection',
          'returned no server status: pass a mysql2 promise connection (not a pool, not a wrapper)',
        );
      const autocommit = (serverStatus & SERVER_STATUS.autocommit) !== 0;
      const inTransaction = (serverStatus & SERVER_STATUS.inTransaction) !== 0;
      if (autocommit && !inTransaction)
        throw new OutboxAutocommitError(
          `agent-outbox: enqueue() refused to write outside a transaction, and wrote nothing. ${OUTSIDE_TRANSACTION} ${AUTOCOMMIT_OPT_IN}`,
        );
    }
    if (rows.length === 0) return [];
    const shapes = messages.map((m) => ({ absolute: m.availableAt !== undefined }));
    const values = rows.flatMap((row, i) => [
      row[0],
      row[1],
      row[2],
      row[3],
      row[4],
      row[7],
      // An absolute time as given; a delay relative to the server's clock (clock.ts).
      shapes[i]!.absolute ? row[6] : row[6] - row[5],
    ]);
    await execute(connection, insertMessagesSql(shapes), values);
    const inserted = await selectRows<{ id: number; messageId: string; sequence: number }>(
      connection,
      insertedSql,
      [rows.map((row) => row[0])],
    );
    const byMessageId = new Map(inserted.map((r) => [r.messageId, r]));
    return rows.map((row): EnqueuedMessage => {
      const found = byMessageId.get(row[0]);
      if (!found)
        throw new Error(
          `agent-outbox: message ${row[0]} was inserted but cannot be read back on this connection`,
        );
      return {
        id: String(found.id),
        messageId: row[0],
        sequence: Number(found.sequence),
        topic: row[2],
        aggregateId: row[1],
        deduped: false,
      };
    });
  }
  return {
    enqueue: (async (
      connection: MysqlQueryable,
      input: OutboxMessage | readonly OutboxMessage[],
      callOptions: MysqlEnqueueOptions = {},
    ) => {
      const many = Array.isArray(input);
      const result = await enqueueMany(
        connection,
        many ? (input as readonly OutboxMessage[]) : [input as OutboxMessage],
        callOptions.allowAutocommit === true,
      );
      return many ? result : result[0];
    }) as MysqlOutboxWriter['enqueue'],
  };
}
