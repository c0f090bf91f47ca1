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
 * Consumer transactions through Drizzle's `db.transaction(...)` (`node-postgres` or
 * `postgres-js` driver). A transactional handler gets Drizzle's `tx` as `trx` and writes its
 * effect with it, in the ledger row's transaction. Single statements run on `db` itself.
 *
 * @example
 * ```ts
 * const ledger = createLedger({ runner: drizzleTransactions(db) });
 * // handler: async (message, { trx }) => { await trx.insert(charges).values(...); }
 * ```
 */
export function drizzleTransactions<Trx extends DrizzleQueryable>(
  db: DrizzleQueryable & DrizzleTransactional<Trx>,
  options: FromDrizzleOptions = {},
): TransactionRunner<Trx> {
  const direct = fromDrizzle(db, options);
  return {
    query: (text, values) => direct.query(text, values),
    transaction: (fn) => db.transaction((trx) => fn(fromDrizzle(trx, options), trx)),
  };
}

/**
 * Consumer transactions through Prisma's interactive `$transaction`. A transactional handler gets
 * Prisma's transaction client as `trx` (`trx.charge.create(...)`). `options` go to `$transaction`:
 * a handler slower than Prisma's 5 s default `timeout` needs a larger one.
 *
 * @example
 * ```ts
 * const ledger = createLedger({ runner: prismaTransactions(prisma, { timeout: 30_000 }) });
 * ```
 */
export function prismaTransactions<Trx extends PrismaQueryable>(
  prisma: PrismaQueryable & PrismaTransactional<Trx>,
  options?: PrismaTransactionOptions,
): TransactionRunner<Trx> {
  const direct = fromPrisma(prisma);
  return {
    query: (text, values) => direct.query(text, values),
    transaction: (fn) => prisma.$transaction((trx) => fn(fromPrisma(trx), trx), options),
  };
}

/**
 * Consumer transactions through postgres.js `sql.begin(...)`. A transactional handler gets the
 * transaction's `sql` as `trx` (`` trx`INSERT ...` ``); single statements run on `sql` itself.
 *
 * @example
 * ```ts
 * const ledger = createLedger({ runner: postgresJsTransactions(postgres(url)) });
 * ```
 */
export function postgresJsTransactions<Trx extends PostgresJsQueryable>(
  sql: PostgresJsQueryable & PostgresJsTransactional<Trx>,
): TransactionRunner<Trx> {
  const direct = fromPostgresJs(sql);
  return {
    query: (text, values) => direct.query(text, values),
    // See the agent runner: begin resolves to what the callback resolved to.
    transaction: async <T>(fn: (tx: SqlExecutor, trx: Trx) => Promise<T>) =>
      (await sql.begin((trx) => fn(fromPostgresJs(trx), trx))) as T,
  };
}
