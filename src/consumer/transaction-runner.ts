import { fromPg, type FromPgOptions, type PgQueryable } from '../store/from-pg.js';
import { fromPglite, type PgliteQueryable } from '../store/from-pglite.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { OutboxValidationError } from '../core/errors.js';

/**
 * Opens transactions for the consumer runtime. `transaction(fn)` commits when `fn` resolves and
 * rolls back when it throws; `query` runs one statement on its own (autocommit). This is what
 * lets the transactional mode write the ledger row in the handler's own transaction, and what
 * keeps claim-first statements short and separate.
 *
 * `fn` receives the transaction twice: as a {@link SqlExecutor} (what the ledger needs) and as
 * `trx`, the client's own transaction object (a `pg` client, a Drizzle or Prisma transaction,
 * postgres.js's transaction `sql`), which a transactional handler gets to write its effect with.
 *
 * Adapters: {@link pgTransactions} (a `pg` Pool), {@link pgliteTransactions} (PGlite),
 * `drizzleTransactions`, `prismaTransactions`, `postgresJsTransactions`. Any other client fits
 * in a few lines — implement the two members.
 */
export interface TransactionRunner<Trx = unknown> extends SqlExecutor {
  transaction<T>(fn: (tx: SqlExecutor, trx: Trx) => Promise<T>): Promise<T>;
}

/** The subset of `pg`'s `Pool` used: a checked-out client and single statements. */
export interface PgPoolLike extends PgQueryable {
  connect(): Promise<PgQueryable & { release(destroy?: boolean | Error): void }>;
}

/** Options of {@link pgTransactions}: `fromPg`'s, and a timeout. */
export interface PgTransactionsOptions extends FromPgOptions {
  /**
   * The ledger's single statements (the claim-first claim, renewal, completion, release) and a
   * ROLLBACK fail after this many ms, and their connection is dropped rather than returned to
   * the pool: a connection that a network partition froze (nothing closed, no error) would
   * otherwise hold a delivery for as long as the operating system keeps the socket. A failed
   * delivery is redelivered by the broker. Statements inside a transaction (the handler's, the
   * transactional ledger row, COMMIT) are not bounded: they may wait for locks by design.
   * Default 10 000; `0` turns it off. Give the pool `keepAlive: true` and a
   * `connectionTimeoutMillis` too (docs/failure-handling.md).
   */
  statementTimeoutMs?: number;
}

/**
 * Transactions on a `pg` Pool: one checked-out client per transaction, `BEGIN`/`COMMIT`/`ROLLBACK`.
 * `options` go to `fromPg` (`preparedStatements: false` behind PgBouncer in transaction mode
 * without prepared-statement support; it matters when the handler enqueues outbox messages).
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({
 *   connectionString: process.env.DATABASE_URL,
 *   keepAlive: true,
 *   connectionTimeoutMillis: 10_000,
 * });
 * const runner = pgTransactions(pool, { statementTimeoutMs: 5_000 });
 * ```
 */
export function pgTransactions(
  pool: PgPoolLike,
  options: PgTransactionsOptions = {},
): TransactionRunner<PgQueryable> {
  const { statementTimeoutMs = 10_000, ...pgOptions } = options;
  if (!Number.isFinite(statementTimeoutMs) || statementTimeoutMs < 0)
    throw new OutboxValidationError(
      'statementTimeoutMs',
      `must be a number >= 0, got ${String(statementTimeoutMs)}`,
    );
  const bounded = statementTimeoutMs > 0 ? { timeoutMs: statementTimeoutMs } : undefined;
  const direct = fromPg(pool, pgOptions);
  return {
    query: (text, values, queryOptions) => direct.query(text, values, queryOptions ?? bounded),
    async transaction<T>(fn: (tx: SqlExecutor, trx: PgQueryable) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        try {
          const result = await fn(fromPg(client, pgOptions), client);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          // A failed ROLLBACK means the connection is unusable: destroy it instead of returning
          // it to the pool with a transaction still open.
          await fromPg(client)
            .query('ROLLBACK', undefined, bounded)
            .catch((rollbackError: Error) => {
              broken = rollbackError;
            });
          throw error;
        }
      } finally {
        client.release(broken ?? false);
      }
    },
  };
}

/** The subset of PGlite used. */
export interface PgliteLike extends PgliteQueryable {
  transaction<T>(fn: (tx: PgliteQueryable) => Promise<T>): Promise<T>;
}

/**
 * Transactions on PGlite (`db.transaction`). PGlite is one connection: transactions of
 * concurrent deliveries queue behind each other, which is correct, only not parallel.
 */
export function pgliteTransactions(db: PgliteLike): TransactionRunner<PgliteQueryable> {
  const direct = fromPglite(db);
  return {
    query: (text, values) => direct.query(text, values),
    transaction: (fn) => db.transaction((tx) => fn(fromPglite(tx), tx)),
  };
}
