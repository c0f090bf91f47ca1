import type { SqlExecutor } from './sql-executor.js';

/**
 * The subset of a Prisma client, or of the `tx` of `prisma.$transaction(async (tx) => ...)`, we
 * call. Typed structurally so the core does not import `@prisma/client`.
 */
export interface PrismaQueryable {
  $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): PromiseLike<T>;
}

const PRISMA_REASON =
  'fromPrisma() was given the PrismaClient itself, not the tx of an interactive transaction: each of its queries commits by itself. Enqueue inside prisma.$transaction(async (tx) => { ... }) on fromPrisma(tx).';

/**
 * Whether `client` is a PrismaClient itself rather than the `tx` of an interactive transaction.
 * The client has `$disconnect`; the `tx` does not (Prisma leaves `$connect`, `$disconnect`, `$on`,
 * `$use` and `$extends` off it; `$transaction` stays, for nested transactions, so it cannot tell).
 * Shared with `fromPrismaMysql`.
 */
export function isPrismaClient(client: object): boolean {
  return typeof (client as { $disconnect?: unknown }).$disconnect === 'function';
}

function prismaOutsideTransaction(client: PrismaQueryable): string | undefined {
  return isPrismaClient(client) ? PRISMA_REASON : undefined;
}

/**
 * Adapts Prisma's interactive transactions:
 * `prisma.$transaction(async (tx) => outbox.enqueue(fromPrisma(tx), message))`. Pass the `tx`
 * Prisma hands you, not `prisma`, whose queries run outside your transaction: `enqueue()` refuses
 * the client itself (nothing written; `{ allowAutocommit: true }` for a lone message on purpose).
 *
 * Runs every statement through `$queryRawUnsafe`, with the values as bind parameters (never
 * interpolated into the text), one statement per call — which is all agent-outbox sends through
 * an executor, except `migrate()`: run the migrations with `fromPg` or the CLI. Tested with
 * Prisma 7 and its `pg` driver adapter (`@prisma/adapter-pg`).
 *
 * Prisma maps int8 to `BigInt` and numeric to `Decimal`; they are turned into strings here, as
 * `pg` (and `fromPg`) returns them, so what reads a row sees the same values whichever client
 * ran it (a `BigInt` would also make a tool's result fail `JSON.stringify`). json/jsonb come back
 * parsed and timestamptz as `Date`, as with `pg`. Prisma does not name statements, so nothing
 * is prepared across calls; its transactions time out after 5 s by default (`$transaction`'s
 * `timeout` option).
 *
 * @example
 * ```ts
 * await prisma.$transaction(async (tx) => {
 *   const order = await tx.order.create({ data: { amount: 1200 } });
 *   await outbox.enqueue(fromPrisma(tx), {
 *     topic: 'payment.charge',
 *     aggregateId: `order:${order.id}`,
 *     payload: { orderId: order.id },
 *   });
 * });
 * ```
 */
export function fromPrisma(tx: PrismaQueryable): SqlExecutor {
  return {
    outsideTransaction: () => prismaOutsideTransaction(tx),
    async query<Row>(text: string, values?: readonly unknown[]) {
      const rows = await tx.$queryRawUnsafe<Record<string, unknown>[]>(text, ...(values ?? []));
      return { rows: rows.map(asPgValues) as Row[] };
    },
  };
}

/** The row with int8 (`BigInt`) and numeric (`Decimal`) columns as strings, as `pg` gives them. */
function asPgValues(row: Record<string, unknown>): Record<string, unknown> {
  let copy: Record<string, unknown> | undefined;
  for (const key in row) {
    const value = row[key];
    const text =
      typeof value === 'bigint'
        ? value.toString()
        : // decimal.js, which Prisma's Decimal is, tags its instances: no import needed.
          Object.prototype.toString.call(value) === '[object Decimal]'
          ? String(value)
          : undefined;
    if (text === undefined) continue;
    copy ??= { ...row };
    copy[key] = text;
  }
  return copy ?? row;
}

/** Options of Prisma's interactive `$transaction(fn, options)`. */
export interface PrismaTransactionOptions {
  /** How long to wait for a connection from the pool, in ms. Prisma's default: 2000. */
  maxWait?: number;
  /** How long the whole transaction may take before Prisma rolls it back, in ms. Default: 5000. */
  timeout?: number;
  /** `'ReadCommitted'`, `'RepeatableRead'`, `'Serializable'`, ... Default: the database's. */
  isolationLevel?: string;
}

/**
 * The subset of a Prisma client the transaction runners (`prismaTransactions`) call; `Trx` is
 * its transaction client.
 */
export interface PrismaTransactional<Trx extends PrismaQueryable> {
  $transaction<T>(fn: (tx: Trx) => Promise<T>, options?: PrismaTransactionOptions): Promise<T>;
}
