import type { ClaimOutcome, ConsumerLedger } from '../../consumer/ledger.js';
import { readPositionSql } from '../../sql/sqlite/consumer.js';
import {
  advancePositionSql,
  completeClaimSql,
  insertClaimSql,
  ledgerRowSql,
  moveClaimSql,
  recordDoneSql,
  releaseClaimSql,
} from '../../sql/sqlite/consumer-ledger.js';
import { fromSqlite } from './from-sqlite.js';
import { immediate, numbered, prepared, type SqliteDatabase } from './sqlite-database.js';

/** Options of {@link createSqliteLedger}. */
export interface SqliteLedgerOptions {
  /** Clock in ms since the epoch. Default `Date.now`. */
  now?: () => number;
}

/**
 * Per connection, the tail of the ledger's work on it: a transaction that awaits its handler
 * keeps the connection inside `BEGIN ... COMMIT`, so anything else the ledger runs on that
 * connection waits for it, or it would land in that transaction.
 */
const queues = new WeakMap<SqliteDatabase, Promise<unknown>>();

function serialised<T>(db: SqliteDatabase, fn: () => Promise<T>): Promise<T> {
  const run = (queues.get(db) ?? Promise.resolve()).then(fn, fn);
  queues.set(
    db,
    run.catch(() => undefined),
  );
  return run;
}

/**
 * The consumer ledger on a SQLite file (`processed_messages` and `consumer_positions`, the tables
 * `migrateSqlite` creates), for `createConsumer` in both modes: the effect recorded once per
 * (consumer, message id), duplicates acked without running the handler, a failed handler leaving
 * nothing. Its statements are in src/sql/sqlite/consumer-ledger.ts.
 *
 * `transaction` opens a `BEGIN IMMEDIATE` transaction on `db` and hands the handler `tx` (an
 * executor on it: `?` or `?1` parameters) and `trx` (`db` itself, for better-sqlite3 calls): the
 * effect, the ledger row and the position commit together or not at all. It holds the file's
 * write lock until the handler returns — keep transactional handlers to their database writes,
 * and give the ledger a connection of its own (`openSqlite`): the ledger runs one transaction at
 * a time on it, and other code on the same connection would write inside it.
 *
 * @example
 * ```ts
 * const consumer = createConsumer({
 *   name: 'billing',
 *   mode: 'transactional',
 *   ledger: createSqliteLedger(await openSqlite('file:./agent.db')),
 *   handler: async (message, { trx }) => {
 *     trx.prepare('INSERT INTO charges (message_id) VALUES (?)').run(message.id);
 *   },
 * });
 * ```
 */
export function createSqliteLedger(
  db: SqliteDatabase,
  options: SqliteLedgerOptions = {},
): ConsumerLedger<SqliteDatabase> {
  const now = options.now ?? Date.now;
  const tx = fromSqlite(db);
  const run = (sql: string, values: unknown[]) => prepared(db, sql).run(numbered(values));
  const get = (sql: string, values: unknown[]) => prepared(db, sql).get(numbered(values));
  /** One synchronous piece of work, after the ledger's work before it on this connection. */
  const single = <T>(fn: () => T) => serialised(db, () => Promise.resolve().then(fn));
  const positionOf = (consumer: string, aggregateId: string) =>
    Number(
      (get(readPositionSql, [consumer, aggregateId]) as { last_sequence?: number } | undefined)
        ?.last_sequence ?? 0,
    );

  return {
    schema: 'main',

    transaction: (fn) =>
      serialised(db, async () => {
        db.exec('BEGIN IMMEDIATE');
        try {
          const result = await fn({
            executor: tx,
            trx: db,
            recordDone: (consumer, messageId) =>
              Promise.resolve(get(recordDoneSql, [consumer, messageId, now()]) !== undefined),
            // The file is locked for writers already (BEGIN IMMEDIATE): a read is enough.
            lockPosition: (consumer, aggregateId) =>
              Promise.resolve(positionOf(consumer, aggregateId)),
            advancePosition: (consumer, aggregateId, sequence) =>
              Promise.resolve(
                void run(advancePositionSql, [consumer, aggregateId, sequence, now()]),
              ),
          });
          db.exec('COMMIT');
          return result;
        } catch (error) {
          if (db.inTransaction) db.exec('ROLLBACK');
          throw error;
        }
      }),

    claim: (consumer, messageId, leaseMs) =>
      single((): ClaimOutcome => {
        const at = now();
        const until = at + Math.max(1, Math.round(leaseMs));
        return immediate(db, () => {
          const row = get(ledgerRowSql, [consumer, messageId]) as
            { state: 'claimed' | 'done'; leaseExpiresAt: number | null } | undefined;
          if (!row) {
            run(insertClaimSql, [consumer, messageId, at, until]);
            return { status: 'acquired', token: String(until), takeover: false };
          }
          if (row.state === 'done') return { status: 'done' };
          const expires = Number(row.leaseExpiresAt ?? 0);
          if (expires > at) return { status: 'held', remainingMs: expires - at };
          run(moveClaimSql, [consumer, messageId, at, until, row.leaseExpiresAt]);
          return { status: 'acquired', token: String(until), takeover: true };
        });
      }),

    renew: (consumer, messageId, token, leaseMs) =>
      single(() => {
        const at = now();
        const until = Math.max(Number(token), at + Math.max(1, Math.round(leaseMs)));
        const { changes } = immediate(db, () =>
          run(moveClaimSql, [consumer, messageId, at, until, Number(token)]),
        );
        return changes === 1 ? String(until) : undefined;
      }),

    complete: (consumer, messageId, position) =>
      single(() =>
        immediate(db, () => {
          run(completeClaimSql, [consumer, messageId, now()]);
          if (position)
            run(advancePositionSql, [consumer, position.aggregateId, position.sequence, now()]);
        }),
      ),

    release: (consumer, messageId, token) =>
      single(
        () => void immediate(db, () => run(releaseClaimSql, [consumer, messageId, Number(token)])),
      ),

    position: (consumer, aggregateId) => single(() => positionOf(consumer, aggregateId)),

    state: (consumer, messageId) =>
      single(
        () =>
          (get(ledgerRowSql, [consumer, messageId]) as { state: 'claimed' | 'done' } | undefined)
            ?.state,
      ),
  };
}
