import type { PGliteInterface, Transaction as PgliteTransaction } from '@electric-sql/pglite';
import {
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  type CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
} from 'kysely';

/**
 * A Kysely dialect for PGlite 0.5 (`kysely-pglite-dialect` accepts only PGlite ≤ 0.4).
 *
 * PGlite is ONE connection. A Kysely transaction therefore runs inside PGlite's own
 * `db.transaction()`, parked open until Kysely commits or rolls back: PGlite's transaction lock
 * then makes every other `db.query()` — the dispatcher's, another tool call's — wait, instead of
 * running inside this transaction (which a bare `BEGIN` on the shared connection would allow).
 */
export class PgliteDialect implements Dialect {
  readonly #db: PGliteInterface;

  constructor(db: PGliteInterface) {
    this.#db = db;
  }

  createAdapter() {
    return new PostgresAdapter();
  }

  createDriver(): Driver {
    return new PgliteDriver(this.#db);
  }

  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- Kysely's own signature
  createIntrospector(db: Kysely<any>) {
    return new PostgresIntrospector(db);
  }

  createQueryCompiler() {
    return new PostgresQueryCompiler();
  }
}

class PgliteDriver implements Driver {
  readonly #db: PGliteInterface;

  constructor(db: PGliteInterface) {
    this.#db = db;
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    return new PgliteConnection(this.#db);
  }

  async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await (connection as PgliteConnection).begin();
  }

  async commitTransaction(connection: DatabaseConnection): Promise<void> {
    await (connection as PgliteConnection).end(true);
  }

  async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await (connection as PgliteConnection).end(false);
  }

  async releaseConnection(): Promise<void> {}

  /** The PGlite instance belongs to the caller: destroying Kysely does not close it. */
  async destroy(): Promise<void> {}
}

class PgliteConnection implements DatabaseConnection {
  readonly #db: PGliteInterface;
  #tx: PgliteTransaction | undefined;
  #finish: ((commit: boolean) => void) | undefined;
  #done: Promise<void> | undefined;

  constructor(db: PGliteInterface) {
    this.#db = db;
  }

  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    const target = this.#tx ?? this.#db;
    const result = await target.query<R>(query.sql, [...query.parameters]);
    return {
      rows: result.rows,
      ...(result.affectedRows !== undefined
        ? { numAffectedRows: BigInt(result.affectedRows) }
        : {}),
    };
  }

  // eslint-disable-next-line require-yield
  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('PgliteDialect does not support streaming');
  }

  async begin(): Promise<void> {
    let started!: () => void;
    const ready = new Promise<void>((resolve) => (started = resolve));
    const decided = new Promise<boolean>((resolve) => (this.#finish = resolve));
    this.#done = this.#db.transaction(async (tx) => {
      this.#tx = tx;
      started();
      if (!(await decided)) await tx.rollback();
    });
    // A failed BEGIN rejects #done before `ready` resolves.
    await Promise.race([ready, this.#done]);
  }

  async end(commit: boolean): Promise<void> {
    this.#finish?.(commit);
    try {
      await this.#done;
    } finally {
      this.#tx = undefined;
      this.#finish = undefined;
      this.#done = undefined;
    }
  }
}
