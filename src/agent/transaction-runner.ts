import { fromKysely, type KyselyQueryable } from '../store/from-kysely.js';
import { fromPg, type FromPgOptions, type PgQueryable } from '../store/from-pg.js';
import { fromPglite, type PgliteQueryable } from '../store/from-pglite.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Runs a function inside one database transaction: COMMIT when it resolves, ROLLBACK when it
 * throws (the error is rethrown). The function receives the transaction twice: as a
 * {@link SqlExecutor} (what the outbox writer needs) and as `trx`, the client's own transaction
 * object (a Kysely `Transaction`, a `pg` `PoolClient`, a PGlite `Transaction`) for your queries.
 *
 * Adapters: {@link pgPoolTransactions}, {@link kyselyTransactions}, {@link pgliteTransactions}.
 * Any other client fits in a few lines; the runner must give `fn` ONE connection for the whole
 * transaction.
 */
export interface TransactionRunner<Trx = SqlExecutor> {
  run<T>(fn: (tx: SqlExecutor, trx: Trx) => Promise<T>): Promise<T>;
}

/** The subset of a `pg` `PoolClient` the pool runner calls. */
export interface PgPoolClientLike extends PgQueryable {
  /** `release(error)` destroys the connection instead of returning it to the pool. */
  release(error?: Error | boolean): void;
}

/** The subset of a `pg` `Pool` the pool runner calls. */
export interface PgPoolLike<Client extends PgPoolClientLike = PgPoolClientLike> {
  connect(): Promise<Client>;
}

/**
 * Transactions on a `pg` `Pool`: checks out a client, `BEGIN` ... `COMMIT`/`ROLLBACK`, releases it.
 * `options` go to {@link fromPg} (`preparedStatements: false` behind PgBouncer in transaction
 * mode without prepared-statement support).
 *
 * @example
 * ```ts
 * const transactions = pgPoolTransactions(new pg.Pool({ connectionString }));
 * ```
 */
export function pgPoolTransactions<Client extends PgPoolClientLike>(
  pool: PgPoolLike<Client>,
  options: FromPgOptions = {},
): TransactionRunner<Client> {
  return {
    async run(fn) {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('BEGIN');
        try {
          const result = await fn(fromPg(client, options), client);
          await client.query('COMMIT');
          return result;
        } catch (error) {
          // A failed ROLLBACK leaves the connection in an unknown state: destroy it, not reuse it.
          await client.query('ROLLBACK').catch((rollbackError: unknown) => {
            broken =
              rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError));
          });
          throw error;
        }
      } finally {
        client.release(broken);
      }
    },
  };
}

/** The subset of a `Kysely` instance the Kysely runner calls; `Trx` is its `Transaction<DB>`. */
export interface KyselyTransactional<Trx extends KyselyQueryable> {
  transaction(): { execute<T>(callback: (trx: Trx) => Promise<T>): Promise<T> };
}

/**
 * Transactions through Kysely's `db.transaction().execute(...)`; `trx` is the typed
 * `Transaction<DB>`, so your queries keep Kysely's types.
 *
 * @example
 * ```ts
 * const transactions = kyselyTransactions(db); // db: Kysely<Database>
 * // in a handler: await trx.insertInto('orders').values(row).execute();
 * ```
 */
export function kyselyTransactions<Trx extends KyselyQueryable>(
  db: KyselyTransactional<Trx>,
): TransactionRunner<Trx> {
  return {
    run: (fn) => db.transaction().execute((trx) => fn(fromKysely(trx), trx)),
  };
}

/** The subset of PGlite the PGlite runner calls; `Trx` is its `Transaction`. */
export interface PgliteTransactional<Trx extends PgliteQueryable> {
  transaction<T>(callback: (tx: Trx) => Promise<T>): Promise<T>;
}

/**
 * Transactions on PGlite. PGlite is one connection: its `transaction()` holds a lock, so calls
 * run one after another — and a handler must use `tx`/`trx`, never the top-level `db`, or it
 * waits for itself.
 */
export function pgliteTransactions<Trx extends PgliteQueryable>(
  db: PgliteTransactional<Trx>,
): TransactionRunner<Trx> {
  return {
    run: (fn) => db.transaction((trx) => fn(fromPglite(trx), trx)),
  };
}
