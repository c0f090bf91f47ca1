import type { SqlExecutor } from '../../store/sql-executor.js';
import { numbered, type SqliteDatabase } from './sqlite-database.js';

/** Numbered (`?1`, `$1`) or named parameters: bound from an object rather than by position. */
const NUMBERED = /[?$:@][A-Za-z0-9_]/;

/**
 * A {@link SqlExecutor} over a better-sqlite3 connection, for code written against the executor
 * (a transactional consumer's handler gets one as `tx`). Values bind by position to `?`, or by
 * number to `?1` / `$1`. Rows come back as objects; JSON columns stay text (SQLite has no JSON
 * type: `JSON.parse` them). Synchronous underneath: each call has run when it returns.
 *
 * @example
 * ```ts
 * const tx = fromSqlite(db);
 * await tx.query('INSERT INTO charges (message_id, amount) VALUES (?, ?)', ['m-1', 1200]);
 * ```
 */
export function fromSqlite(db: SqliteDatabase): SqlExecutor {
  return {
    query<Row>(text: string, values: readonly unknown[] = []) {
      try {
        const statement = db.prepare(text);
        const bound = NUMBERED.test(text) ? [numbered(values)] : values;
        const rows = statement.reader === false ? [] : (statement.all(...bound) as Row[]);
        if (statement.reader === false) statement.run(...bound);
        return Promise.resolve({ rows });
      } catch (error) {
        return Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
    },
    outsideTransaction: () =>
      db.inTransaction
        ? undefined
        : 'the better-sqlite3 connection is not inside a transaction (run the statement inside db.transaction(...) or BEGIN ... COMMIT)',
  };
}
