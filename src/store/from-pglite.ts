import type { SqlExecutor } from './sql-executor.js';

/** The subset of PGlite (or its `Transaction`) we call. */
export interface PgliteQueryable {
  query<T>(text: string, params?: unknown[]): Promise<{ rows: T[] }>;
}

/**
 * Adapts PGlite, or the `tx` handed to `db.transaction(async (tx) => ...)`.
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
    async query<Row>(text: string, values?: readonly unknown[]) {
      const result = await db.query<Row>(text, values ? [...values] : undefined);
      return { rows: result.rows };
    },
  };
}
