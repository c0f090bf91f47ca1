import type { SqlExecutor } from './sql-executor.js';

/** The subset of PGlite (or its `Transaction`) we call. */
export interface PgliteQueryable {
  query<T>(
    text: string,
    params?: unknown[],
    options?: { parsers?: Record<number, (value: string) => unknown> },
  ): Promise<{ rows: T[] }>;
}

/**
 * `bigint` (OID 20) as its text, as node-postgres returns it: PGlite parses it into a number by
 * default, and the lanes engine compares and echoes its ids and cursors as the text Postgres gave
 * (a number there made its drain read the same batch again and again). Also past 2^53.
 */
const PARSERS = { parsers: { 20: (value: string) => value } };

const PGLITE_REASON =
  "fromPglite() was given a PGlite database that is not inside a transaction: the insert would commit by itself. Enqueue inside db.transaction(async (tx) => { ... }) on fromPglite(tx), or run db.query('BEGIN') first.";

/**
 * The database itself has `isInTransaction()` (PGlite 0.2+: the status of the last
 * ReadyForQuery, no query); the `tx` of `db.transaction()` is inside one by construction.
 */
function pgliteOutsideTransaction(db: PgliteQueryable): string | undefined {
  const { isInTransaction } = db as { isInTransaction?: () => boolean };
  if (typeof isInTransaction !== 'function') return undefined;
  return isInTransaction.call(db) ? undefined : PGLITE_REASON;
}

/**
 * Adapts PGlite, or the `tx` handed to `db.transaction(async (tx) => ...)`. `enqueue()` refuses
 * the database when it is not inside a transaction (nothing written; `{ allowAutocommit: true }`
 * for a lone message on purpose).
 *
 * @example
 * ```ts
 * await db.transaction(async (tx) => {
 *   await tx.query('INSERT INTO orders ...');
 *   await outbox.enqueue(fromPglite(tx), message);
 * });
 * ```
 */
export function fromPglite(db: PgliteQueryable): SqlExecutor {
  return {
    outsideTransaction: () => pgliteOutsideTransaction(db),
    async query<Row>(text: string, values?: readonly unknown[]) {
      const result = await db.query<Row>(text, values ? [...values] : undefined, PARSERS);
      return { rows: result.rows };
    },
  };
}
