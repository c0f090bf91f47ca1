import { OutboxAutocommitError, OutboxValidationError } from '../../core/errors.js';
import type { EnqueuedMessage, OutboxMessage } from '../../core/message.js';
import { messageRows, type MessageRowOptions } from '../../core/message-rows.js';
import { bumpSequenceSql, insertMessageSql } from '../../sql/sqlite/enqueue.js';
import { AUTOCOMMIT_OPT_IN } from '../../store/sql-executor.js';
import { immediate, numbered, prepared, type SqliteDatabase } from './sqlite-database.js';

/** Options of {@link createSqliteOutbox}. */
export interface SqliteOutboxOptions extends MessageRowOptions {
  /** Clock for `created_at` / `available_at`, in ms since the epoch. Default `Date.now`. */
  now?: () => number;
}

/** Per-call options of {@link SqliteOutboxWriter.enqueue}. */
export interface SqliteEnqueueOptions {
  /**
   * Write even when `db` is not inside a transaction: the messages then commit by themselves (in
   * one transaction of their own), apart from any business rows — a lone message, on purpose.
   * Default false: such a call throws `OutboxAutocommitError` and writes nothing.
   */
  allowAutocommit?: boolean;
}

/** Writes messages on the caller's SQLite transaction. Create with {@link createSqliteOutbox}. */
export interface SqliteOutboxWriter {
  /**
   * Validates and inserts messages on `db`, which must be inside the caller's transaction
   * (better-sqlite3's `db.transaction(fn)`, or your own `BEGIN`): synchronous, like
   * better-sqlite3 itself, so it fits inside a transaction function. Nothing is written when any
   * message is invalid; an empty array writes nothing. A `db` outside a transaction is refused
   * with `OutboxAutocommitError` unless `options.allowAutocommit` is set. The rows become visible
   * to dispatchers when the caller commits, and vanish if it rolls back.
   */
  enqueue(
    db: SqliteDatabase,
    message: OutboxMessage,
    options?: SqliteEnqueueOptions,
  ): EnqueuedMessage;
  enqueue(
    db: SqliteDatabase,
    messages: readonly OutboxMessage[],
    options?: SqliteEnqueueOptions,
  ): EnqueuedMessage[];
}

const OUTSIDE_TRANSACTION =
  'The better-sqlite3 database is not inside a transaction: the insert would commit by itself. Call enqueue() inside db.transaction(() => { ...your rows...; outbox.enqueue(db, message) }) (prefer .immediate(): the write lock is taken at once instead of failing with SQLITE_BUSY when another process wrote first).';

/**
 * Creates the SQLite writer: the same message shape, validation and errors as the Postgres
 * writer, the statements D1 uses (src/sql/sqlite/enqueue.ts). Sequences follow commit order per
 * aggregate because SQLite runs one write transaction at a time. Not supported here (refused, not
 * ignored): `dedupeKey`, `requiresApproval`, `shadow`.
 *
 * @example
 * ```ts
 * const outbox = createSqliteOutbox();
 * const placeOrder = db.transaction((order: { id: string; total: number }) => {
 *   db.prepare('INSERT INTO orders (id, total) VALUES (?, ?)').run(order.id, order.total);
 *   outbox.enqueue(db, {
 *     topic: 'payment.charge',
 *     aggregateId: `order:${order.id}`,
 *     payload: { orderId: order.id, amount: order.total },
 *   });
 * });
 * placeOrder.immediate({ id: '42', total: 1200 });
 * ```
 */
export function createSqliteOutbox(options: SqliteOutboxOptions = {}): SqliteOutboxWriter {
  const now = options.now ?? Date.now;
  function enqueueMany(
    db: SqliteDatabase,
    messages: readonly OutboxMessage[],
    allowAutocommit: boolean,
  ): EnqueuedMessage[] {
    if (typeof db?.prepare !== 'function' || typeof db.inTransaction !== 'boolean')
      throw new OutboxValidationError(
        'db',
        'must be a better-sqlite3 Database (see openSqlite), inside a transaction',
      );
    if (!Array.isArray(messages))
      throw new OutboxValidationError('messages', 'must be a message object or an array of them');
    const outside = !db.inTransaction;
    // Before the empty-batch shortcut: a call outside a transaction is a mistake whatever it holds.
    if (outside && !allowAutocommit)
      throw new OutboxAutocommitError(
        `agent-outbox: enqueue() refused to write outside a transaction, and wrote nothing. ${OUTSIDE_TRANSACTION} ${AUTOCOMMIT_OPT_IN}`,
      );
    const rows = messageRows(messages, options, now(), 'SQLite outbox');
    if (rows.length === 0) return [];
    const write = () =>
      rows.map((row): EnqueuedMessage => {
        prepared(db, bumpSequenceSql).run(numbered([row[1]]));
        const inserted = prepared(db, insertMessageSql).get(numbered(row)) as {
          id: number;
          sequence: number;
        };
        return {
          id: String(inserted.id),
          messageId: row[0],
          sequence: Number(inserted.sequence),
          topic: row[2],
          aggregateId: row[1],
          deduped: false,
        };
      });
    // A lone write still takes the counter and the row together: a sequence with no message
    // would be a hole consumers wait on.
    return outside ? immediate(db, write) : write();
  }
  return {
    enqueue: ((
      db: SqliteDatabase,
      input: OutboxMessage | readonly OutboxMessage[],
      callOptions: SqliteEnqueueOptions = {},
    ) => {
      const many = Array.isArray(input);
      const result = enqueueMany(
        db,
        many ? (input as readonly OutboxMessage[]) : [input as OutboxMessage],
        callOptions.allowAutocommit === true,
      );
      return many ? result : result[0];
    }) as SqliteOutboxWriter['enqueue'],
  };
}
