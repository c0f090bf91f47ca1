import { fromPg, type FromPgOptions, type PgQueryable } from '../store/from-pg.js';
import { fromPglite, type PgliteQueryable } from '../store/from-pglite.js';
import type { SqlExecutor } from '../store/sql-executor.js';

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

/**
 * Transactions on a `pg` Pool: one checked-out client per transaction, `BEGIN`/`COMMIT`/`ROLLBACK`.
 * `options` go to `fromPg` (`preparedStatements: false` behind PgBouncer in transaction mode
 * without prepared-statement support; it matters when the handler enqueues outbox messages).
 *
 * @example
 * ```ts
 * const runner = pgTransactions(new pg.Pool({ connectionString: process.env.DATABASE_URL }));
 * ```
 */
export function pgTransactions(
  pool: PgPoolLike,
  options: FromPgOptions = {},
): TransactionRunner<PgQueryable> {
  const direct = fromPg(pool, options);
  return {
    query: (text, values) => direct.query(text, values),
    async transaction<T>(fn: (tx: SqlExecutor, trx: PgQueryable) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        try {
          const result = await fn(fromPg(client, options), client);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          // A failed ROLLBACK means the connection is unusable: destroy it instead of returning
          // it to the pool with a transaction still open.
          await client.query('ROLLBACK').catch((rollbackError: Error) => {
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
