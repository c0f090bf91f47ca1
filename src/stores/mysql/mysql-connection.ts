/**
 * The structural subset of mysql2's promise API (`mysql2/promise`) this store calls, typed here
 * so the package imports mysql2 (an optional peer) only where it opens a pool (open-mysql.ts).
 * A mysql2 3.x `Connection`, `PoolConnection` and `Pool` satisfy these as they are.
 */
export interface MysqlQueryable {
  /** Runs `sql` with `?` placeholders (an array value expands to a list). */
  query(sql: string, values?: unknown): Promise<[unknown, unknown]>;
  /**
   * Set by adapters that know whether they run inside a transaction without asking the server
   * (`fromKyselyMysql`): why a write would commit by itself, or undefined when it would not.
   * Absent on a mysql2 connection: the writer reads the server's status flags instead.
   */
  outsideTransaction?(): string | undefined;
}

/** A connection of a pool (mysql2 `PoolConnection`). */
export interface MysqlPoolConnection extends MysqlQueryable {
  release(): void;
}

/** A connection pool (mysql2 `Pool`): the dispatcher's and the admin calls' connections. */
export interface MysqlPool extends MysqlQueryable {
  getConnection(): Promise<MysqlPoolConnection>;
  end(): Promise<void>;
}

/** What mysql2 returns for a statement that returns no rows (`ResultSetHeader`). */
export interface MysqlResultHeader {
  affectedRows: number;
  insertId: number;
  /** The server's status flags after the statement (see {@link SERVER_STATUS}). */
  serverStatus?: number;
}

/** Server status flags of the MySQL protocol's OK packet. */
export const SERVER_STATUS = { inTransaction: 1, autocommit: 2 } as const;

/** The rows of a SELECT. */
export async function selectRows<T>(
  db: MysqlQueryable,
  sql: string,
  values?: unknown[],
): Promise<T[]> {
  const [rows] = await db.query(sql, values);
  return rows as T[];
}

/** The result header of an INSERT/UPDATE/DELETE/DO. */
export async function execute(
  db: MysqlQueryable,
  sql: string,
  values?: unknown[],
): Promise<MysqlResultHeader> {
  const [header] = await db.query(sql, values);
  return header as MysqlResultHeader;
}

/**
 * Session settings of every connection the store runs its own transactions on: READ COMMITTED
 * (a claim's locking read then releases the rows it rejects at once, and takes no gap locks that
 * writers would wait on; the settle's head computation reads a fresh snapshot per statement) and
 * UTC (the server's clock as epoch ms is exact, src/sql/mysql/clock.ts).
 */
export const SESSION_SETUP_SQL = [
  // Its own statement: the variable is `transaction_isolation` on MySQL 8 and `tx_isolation` on
  // MariaDB before 11.1, and this form sets it on both.
  'SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED',
  "SET SESSION time_zone = '+00:00'",
];

/** Underlying connections already set up: a pool hands out a new wrapper for the same one. */
const setUp = new WeakSet<object>();

/** MySQL error numbers the store retries a transaction on (a deadlock victim, a lock wait timeout). */
const RETRYABLE = new Set([1213, 1205]);

/**
 * Runs `fn` in a READ COMMITTED (or, when asked, READ UNCOMMITTED) transaction on a connection of `pool`, retrying it (up to three
 * times) when InnoDB chose it as a deadlock victim or a lock wait timed out: both roll back the
 * whole transaction, so running it again is safe.
 */
export async function inTransaction<T>(
  pool: MysqlPool,
  fn: (connection: MysqlQueryable) => Promise<T>,
  options: { readUncommitted?: boolean } = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const connection = await pool.getConnection();
    try {
      const key = (connection as { connection?: object }).connection ?? connection;
      if (!setUp.has(key)) {
        for (const statement of SESSION_SETUP_SQL) await connection.query(statement);
        setUp.add(key);
      }
      // `readUncommitted`: this one transaction reads dirty (the claims' floor, floor.ts); SET
      // TRANSACTION without SESSION applies to the next transaction only.
      if (options.readUncommitted === true)
        await connection.query('SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED');
      await connection.query('BEGIN');
      try {
        const result = await fn(connection);
        await connection.query('COMMIT');
        return result;
      } catch (error) {
        await connection.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
    } catch (error) {
      const errno = (error as { errno?: number }).errno;
      if (attempt >= 3 || errno === undefined || !RETRYABLE.has(errno)) throw error;
    } finally {
      connection.release();
    }
  }
}
