import {
  fromDrizzle,
  type DrizzleQueryable,
  type DrizzleTransactional,
  type FromDrizzleOptions,
} from '../store/from-drizzle.js';
import {
  fromPostgresJs,
  type PostgresJsQueryable,
  type PostgresJsTransactional,
} from '../store/from-postgres-js.js';
import {
  fromPrisma,
  type PrismaQueryable,
  type PrismaTransactional,
  type PrismaTransactionOptions,
} from '../store/from-prisma.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { TransactionRunner } from './transaction-runner.js';

/**
 * Transactions through Drizzle's `db.transaction(...)` (`node-postgres` or `postgres-js`
 * driver); `trx` is Drizzle's typed transaction, for your queries. `options` go to
 * {@link fromDrizzle}.
 *
 * @example
 * ```ts
 * const transactions = drizzleTransactions(db); // db = drizzle(pool) or drizzle(sql)
 * // in a handler: await trx.insert(orders).values(row);
 * ```
 */
export function drizzleTransactions<Trx extends DrizzleQueryable>(
  db: DrizzleTransactional<Trx>,
  options: FromDrizzleOptions = {},
): TransactionRunner<Trx> {
  return {
    run: (fn) => db.transaction((trx) => fn(fromDrizzle(trx, options), trx)),
  };
}

/**
 * Transactions through Prisma's interactive `prisma.$transaction(async (tx) => ...)`; `trx` is
 * Prisma's transaction client, for your queries (`trx.order.create(...)`). `options` go to
 * `$transaction`: raise `timeout` for a tool that runs longer than Prisma's 5 s default.
 *
 * @example
 * ```ts
 * const transactions = prismaTransactions(prisma, { timeout: 15_000 });
 * ```
 */
export function prismaTransactions<Trx extends PrismaQueryable>(
  prisma: PrismaTransactional<Trx>,
  options?: PrismaTransactionOptions,
): TransactionRunner<Trx> {
  return {
    run: (fn) => prisma.$transaction((trx) => fn(fromPrisma(trx), trx), options),
  };
}

/**
 * Transactions through postgres.js `sql.begin(async (tx) => ...)`; `trx` is the transaction's
 * `sql`, for your queries (`` trx`INSERT ...` ``).
 *
 * @example
 * ```ts
 * const transactions = postgresJsTransactions(postgres(process.env.DATABASE_URL));
 * ```
 */
export function postgresJsTransactions<Trx extends PostgresJsQueryable>(
  sql: PostgresJsTransactional<Trx>,
): TransactionRunner<Trx> {
  return {
    // begin resolves to what the callback resolved to; its type only says so for postgres.js's
    // own overloads (it also unwraps arrays of queries, which an async callback never returns).
    run: async <T>(fn: (tx: SqlExecutor, trx: Trx) => Promise<T>) =>
      (await sql.begin((trx) => fn(fromPostgresJs(trx), trx))) as T,
  };
}
