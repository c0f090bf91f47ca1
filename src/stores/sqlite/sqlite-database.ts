/**
 * The structural subset of a better-sqlite3 `Database` this store calls, typed here so the
 * package imports better-sqlite3 (an optional peer) only where it opens a file
 * (open-sqlite.ts). A better-sqlite3 12 `Database` satisfies it as it is.
 */
export interface SqliteDatabase {
  prepare(sql: string): SqliteStatement;
  exec(sql: string): unknown;
  pragma(source: string, options?: { simple?: boolean }): unknown;
  /** True between BEGIN and COMMIT/ROLLBACK: how the writer tells a transaction from autocommit. */
  readonly inTransaction: boolean;
  readonly open: boolean;
  /** The file's path (`:memory:` for an in-memory database). */
  readonly name: string;
  close(): unknown;
  /**
   * Wraps `fn` in a transaction (better-sqlite3's own): call the result, or its `.immediate()`
   * to take the write lock at BEGIN — what an outbox write wants with other processes on the file.
   */
  transaction<F extends AnyFunction>(fn: F): SqliteTransaction<F>;
}

// The shape better-sqlite3 declares, so that its Database is assignable to this one.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyFunction = (...params: any[]) => unknown;
type Arguments<F> = F extends (...args: infer A) => unknown ? A : never;

/** A function wrapped by {@link SqliteDatabase.transaction}. */
export interface SqliteTransaction<F extends AnyFunction> {
  (...args: Arguments<F>): ReturnType<F>;
  deferred(...args: Arguments<F>): ReturnType<F>;
  immediate(...args: Arguments<F>): ReturnType<F>;
  exclusive(...args: Arguments<F>): ReturnType<F>;
}

/** A prepared statement (better-sqlite3 `Statement`). */
export interface SqliteStatement {
  run(...params: unknown[]): { changes: number };
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  /** Rows as arrays of column values instead of objects (better-sqlite3 `raw(true)`). */
  raw?(toggle?: boolean): unknown;
  /** Rows as the value of their first column (better-sqlite3 `pluck(true)`). */
  pluck?(toggle?: boolean): unknown;
  /** False for a statement that returns no rows (better-sqlite3 `reader`): `run` it, not `all`. */
  readonly reader?: boolean;
}

/**
 * The shared SQLite statements (src/sql/sqlite) use numbered parameters (`?1`, `?2`), which D1
 * binds positionally; better-sqlite3 binds them from an object keyed by number.
 */
export function numbered(values: readonly unknown[]): Record<number, unknown> {
  const bound: Record<number, unknown> = {};
  values.forEach((value, index) => (bound[index + 1] = value));
  return bound;
}

/**
 * How a prepared statement hands back rows: as objects keyed by column (the default), as arrays
 * of column values (better-sqlite3's raw mode), or as the values of their first column alone
 * (its pluck mode).
 */
export type RowShape = 'objects' | 'arrays' | 'column';

/**
 * Prepared statements per database and row shape: parsing the claim's CTEs on every call would
 * cost more than running them. Keyed by the statement's text itself (a module constant, whose
 * hash V8 computes once), one map per shape.
 */
const cache = new WeakMap<SqliteDatabase, Record<RowShape, Map<string, SqliteStatement>>>();

/**
 * `sql` prepared once per database. `shape` `arrays`: its rows come as arrays of column values,
 * when the client can (better-sqlite3's raw mode): a claim of 200 rows of 11 columns spends about
 * a third of its time building row objects otherwise (bench/cases/sqlite.ts). `column`: the
 * first column's values (pluck mode), for `RETURNING id`.
 */
export function prepared(
  db: SqliteDatabase,
  sql: string,
  shape: RowShape = 'objects',
): SqliteStatement {
  let shapes = cache.get(db);
  if (!shapes)
    cache.set(db, (shapes = { objects: new Map(), arrays: new Map(), column: new Map() }));
  let statement = shapes[shape].get(sql);
  if (!statement) {
    statement = db.prepare(sql);
    const toggle = shape === 'arrays' ? statement.raw : shape === 'column' ? statement.pluck : null;
    if (toggle === undefined)
      throw new TypeError(`the SQLite client cannot return rows as ${shape} (raw or pluck mode)`);
    toggle?.call(statement, true);
    shapes[shape].set(sql, statement);
  }
  return statement;
}

/**
 * Runs `fn` in a `BEGIN IMMEDIATE` transaction: the write lock is taken at BEGIN, waiting up to
 * the connection's `busy_timeout` for another process's writer. A deferred BEGIN would take it at
 * the first write instead, and fail with SQLITE_BUSY (no waiting) when another process committed
 * after this one's first read.
 */
export function immediate<T>(db: SqliteDatabase, fn: () => T): T {
  db.exec('BEGIN IMMEDIATE');
  try {
    const result = fn();
    db.exec('COMMIT');
    return result;
  } catch (error) {
    if (db.inTransaction) db.exec('ROLLBACK');
    throw error;
  }
}
