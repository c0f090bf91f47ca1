import type { ClaimOutcome, ConsumerLedger } from '../../consumer/ledger.js';
import type { TransactionRunner } from '../../consumer/transaction-runner.js';
import type { SqlExecutor } from '../../store/sql-executor.js';
import {
  advancePositionSql,
  claimTokenSql,
  completeClaimSql,
  DEADLOCK_ERRNO,
  DUPLICATE_KEY_ERRNO,
  ensurePositionSql,
  insertClaimSql,
  ledgerStateSql,
  ledgerTablesSql,
  lockLedgerRowSql,
  lockPositionSql,
  readPositionSql,
  recordDoneSql,
  releaseClaimSql,
  renewClaimSql,
  takeOverClaimSql,
} from '../../sql/mysql/consumer.js';

/**
 * The subset of a mysql2 (`mysql2/promise`) connection the ledger calls: `?` placeholders, rows
 * of a SELECT as an array, a result header otherwise.
 */
export interface MysqlLedgerConnection {
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
}

/** The subset of a mysql2 `Pool` the ledger calls. */
export interface MysqlLedgerPool extends MysqlLedgerConnection {
  getConnection(): Promise<MysqlLedgerConnection & { release(): void }>;
}

/** A {@link SqlExecutor} on one mysql2 connection: `?` placeholders, rows of a SELECT. */
function executorOf(connection: MysqlLedgerConnection): SqlExecutor {
  return {
    async query<Row>(text: string, values: readonly unknown[] = []) {
      const [result] = await connection.query(text, values);
      return { rows: Array.isArray(result) ? (result as Row[]) : [] };
    },
  };
}

async function rowsOf<T>(
  connection: MysqlLedgerConnection,
  sql: string,
  values: unknown[],
): Promise<T[]> {
  const [rows] = await connection.query(sql, values);
  return rows as T[];
}

function isDuplicateKey(error: unknown): boolean {
  return (error as { errno?: unknown } | null)?.errno === DUPLICATE_KEY_ERRNO;
}

/**
 * Transactions on a mysql2 pool for the consumer runtime: one pooled connection per transaction,
 * `BEGIN` / `COMMIT` / `ROLLBACK`; `query` runs one statement on its own (autocommit). `fn` gets
 * the connection as `trx`, for the handler's writes with mysql2 itself.
 *
 * @example
 * ```ts
 * const pool = mysql.createPool('mysql://app@127.0.0.1/shop');
 * const runner = mysqlTransactions(pool);
 * ```
 */
export function mysqlTransactions(pool: MysqlLedgerPool): TransactionRunner<MysqlLedgerConnection> {
  const direct = executorOf(pool);
  return {
    query: (text, values) => direct.query(text, values),
    async transaction(fn) {
      const connection = await pool.getConnection();
      try {
        await connection.query('BEGIN');
        try {
          const result = await fn(executorOf(connection), connection);
          await connection.query('COMMIT');
          return result;
        } catch (error) {
          await connection.query('ROLLBACK').catch(() => undefined);
          throw error;
        }
      } finally {
        connection.release();
      }
    },
  };
}

/**
 * Creates the ledger's tables (`processed_messages`, `consumer_positions`) if they are missing.
 * Safe to call on every start.
 */
export async function createMysqlLedgerTables(pool: MysqlLedgerConnection): Promise<void> {
  for (const sql of ledgerTablesSql) await pool.query(sql);
}

/**
 * The consumer ledger on MySQL 8 or MariaDB 10.6+, for `createConsumer` in both modes: the effect
 * recorded once per (consumer, message id), a duplicate delivery acked without running the
 * handler, a failed handler leaving nothing. The same contract as Postgres's `createLedger`;
 * statements and what differs are in src/sql/mysql/consumer.ts. Its tables come with the outbox's
 * migrations (`outbox migrate`, `migrateMysql`, version 2); on a database without the outbox,
 * create them with {@link createMysqlLedgerTables}.
 *
 * @example
 * ```ts
 * const pool = mysql.createPool('mysql://app@127.0.0.1/shop');
 * await createMysqlLedgerTables(pool);
 * const consumer = createConsumer({
 *   name: 'billing',
 *   mode: 'transactional',
 *   ledger: createMysqlLedger(pool),
 *   handler: async (message, { tx }) => {
 *     await tx.query('INSERT INTO charges (message_id) VALUES (?)', [message.id]);
 *   },
 * });
 * ```
 */
export function createMysqlLedger(pool: MysqlLedgerPool): ConsumerLedger<MysqlLedgerConnection> {
  const runner = mysqlTransactions(pool);
  const positionOf = async (connection: MysqlLedgerConnection, sql: string, values: unknown[]) =>
    Number(
      (await rowsOf<{ last_sequence: number | string }>(connection, sql, values))[0]
        ?.last_sequence ?? 0,
    );
  const micros = (ms: number) => Math.max(1, Math.round(ms * 1000));

  /** One claim decision under the row's lock; undefined: a concurrent first claim won. */
  const claimOnce = async (consumer: string, messageId: string, leaseMs: number) => {
    try {
      return await runner.transaction(async (_tx, connection): Promise<ClaimOutcome> => {
        const [row] = await rowsOf<{ state: string; remaining_us: number | string | null }>(
          connection,
          lockLedgerRowSql,
          [consumer, messageId],
        );
        let takeover = false;
        if (!row) await connection.query(insertClaimSql, [consumer, messageId, micros(leaseMs)]);
        else if (row.state === 'done') return { status: 'done' };
        else if (Number(row.remaining_us ?? 0) > 0)
          return { status: 'held', remainingMs: Math.ceil(Number(row.remaining_us) / 1000) };
        else {
          await connection.query(takeOverClaimSql, [micros(leaseMs), consumer, messageId]);
          takeover = true;
        }
        const [claimed] = await rowsOf<{ token: string }>(connection, claimTokenSql, [
          consumer,
          messageId,
        ]);
        return { status: 'acquired', token: claimed!.token, takeover };
      });
    } catch (error) {
      const errno = (error as { errno?: unknown } | null)?.errno;
      if (errno === DUPLICATE_KEY_ERRNO || errno === DEADLOCK_ERRNO) return undefined;
      throw error;
    }
  };

  return {
    schema: 'main',

    transaction: (fn) =>
      runner.transaction((executor, connection) =>
        fn({
          executor,
          trx: connection,
          async recordDone(consumer, messageId) {
            try {
              await connection.query(recordDoneSql, [consumer, messageId]);
              return true;
            } catch (error) {
              if (isDuplicateKey(error)) return false;
              throw error;
            }
          },
          async lockPosition(consumer, aggregateId) {
            await connection.query(ensurePositionSql, [consumer, aggregateId]);
            return positionOf(connection, lockPositionSql, [consumer, aggregateId]);
          },
          async advancePosition(consumer, aggregateId, sequence) {
            await connection.query(advancePositionSql, [consumer, aggregateId, sequence]);
          },
        }),
      ),

    async claim(consumer, messageId, leaseMs) {
      // Another round only after losing the race to insert the first claim: the winner's row
      // exists then (or it rolled back, and this round may take the message).
      for (let round = 0; round < 5; round++) {
        const outcome = await claimOnce(consumer, messageId, leaseMs);
        if (outcome) return outcome;
      }
      return { status: 'held', remainingMs: 0 };
    },

    renew: (consumer, messageId, token, leaseMs) =>
      runner.transaction(async (_tx, connection) => {
        const tokenNow = async () =>
          (await rowsOf<{ token: string }>(connection, claimTokenSql, [consumer, messageId]))[0]
            ?.token;
        // A lost claim (taken over, released, done) no longer carries our token.
        if ((await tokenNow()) !== token) return undefined;
        await connection.query(renewClaimSql, [micros(leaseMs), consumer, messageId, token]);
        return tokenNow();
      }),

    async complete(consumer, messageId, position) {
      await runner.transaction(async (_tx, connection) => {
        await connection.query(completeClaimSql, [consumer, messageId]);
        if (position)
          await connection.query(advancePositionSql, [
            consumer,
            position.aggregateId,
            position.sequence,
          ]);
      });
    },

    async release(consumer, messageId, token) {
      await pool.query(releaseClaimSql, [consumer, messageId, token]);
    },

    position: (consumer, aggregateId) => positionOf(pool, readPositionSql, [consumer, aggregateId]),

    async state(consumer, messageId) {
      const [row] = await rowsOf<{ state: 'claimed' | 'done' }>(pool, ledgerStateSql, [
        consumer,
        messageId,
      ]);
      return row?.state;
    },
  };
}
