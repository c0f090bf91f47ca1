import { immediate, prepared, type SqliteDatabase } from './sqlite-database.js';

/**
 * How the dispatcher's own transactions (claims, settles, releases) reach the disk: `normal`
 * commits them without a flush (`PRAGMA synchronous = NORMAL` around each), `full` leaves the
 * connection's setting as it is (openSqlite's default: a flush per commit). See
 * {@link SqliteWriteQueue}.
 */
export type DispatchSynchronous = 'normal' | 'full';

/** Writes handed to {@link SqliteWriteQueue.defer}, waiting for a transaction. */
interface DeferredWrite {
  /** Runs its statements inside the transaction; returns what its caller asked for. */
  apply: () => number[];
  resolve: (result: number[]) => void;
  reject: (error: unknown) => void;
}

/**
 * Folds a batch's settle into the transaction of the next claim on the same connection.
 *
 * On SQLite a commit is the dearest step of a batch: a write of every page the transaction
 * touched to the WAL and, with `synchronous = FULL`, a flush to disk. A dispatcher that settles
 * a batch in one transaction and claims the next in another pays two per batch; the settle and
 * the next claim touch the same pages (rows of neighbouring ids), so one transaction that runs
 * both writes each page once and commits once (bench/cases/sqlite.ts, `sqlite_dispatch_vs_raw_sql`).
 *
 * {@link defer} takes a write (a settle) without running it; {@link write} runs the writes
 * waiting, oldest first, and then its own (a claim, a release) in ONE `BEGIN IMMEDIATE`
 * transaction. A deferred write with no claim after it runs alone once the current turn of the
 * event loop is over (`setImmediate`): a dispatcher's loop claims again within the same turn,
 * through promise callbacks only, so the hand-over normally happens; a stopping or idle one
 * commits its last settle a moment later.
 *
 * Nothing about the guarantees changes. A settle's statements are fenced by their own lease token
 * wherever they run; they run before the claim, which therefore sees the successors they made
 * ready; until the commit their rows stay leased to the batch, exactly as while a settle of its
 * own was under way. A crash before the commit loses the settle, as a crash between a publish and
 * its settle always did: the messages go out again after their lease, with the same message id.
 *
 * Commits without a flush (`synchronous: 'normal'`, the default). In WAL mode a commit at
 * NORMAL is in the WAL file when it returns, so a process crash (kill -9) loses nothing; only an
 * operating-system crash or a power cut can take the last ones back. For the dispatcher's own
 * writes that costs no guarantee. A lost settle sends its messages again, with the same message
 * id (at least once, as after any crash between a publish and its settle). A lost lease cannot
 * let a second dispatcher send a message whose first send is still under way (G3), because
 * nothing is under way any more: WAL mode needs every connection to a file on one machine (they
 * share its `-shm` memory), so the crash that loses the lease also stopped every dispatcher of
 * that file. And the WAL keeps commits in order, so what survives is the state at an earlier
 * moment, never a settle without the claim before it. What the flush costs depends on the disk:
 * here (bench/cases/sqlite.ts, 20,000 messages in batches of 200) about a tenth of a batch,
 * `sqlite_dispatch_vs_raw_sql` 0.87 with it and 0.97 without; on a disk whose flush takes
 * milliseconds, most of it. Producers' and consumers' transactions, on their own connections or
 * on this one, keep the connection's
 * setting: it is restored after each of the dispatcher's commits (SQLite refuses to change it
 * inside a transaction, so it is set before BEGIN). `full` keeps a flush per commit.
 *
 * Failures stay apart. When the write lock cannot be had (SQLITE_BUSY after the busy timeout),
 * every write of the transaction fails with that error, as each would have alone (the dispatcher
 * retries settles while their lease lasts, claims with backoff). When the transaction fails
 * inside, it was rolled back whole, and each write runs again in a transaction of its own, so a
 * settle never fails because of a claim's error, nor the other way round.
 */
export class SqliteWriteQueue {
  readonly #db: SqliteDatabase;
  readonly #synchronous: DispatchSynchronous;
  readonly #waiting: DeferredWrite[] = [];
  #flushQueued = false;

  constructor(db: SqliteDatabase, synchronous: DispatchSynchronous = 'normal') {
    this.#db = db;
    this.#synchronous = synchronous;
  }

  /** Runs `apply` in the next transaction of this queue; resolves once that commits. */
  defer(apply: () => number[]): Promise<number[]> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ apply, resolve, reject });
      if (this.#flushQueued) return;
      this.#flushQueued = true;
      setImmediate(() => {
        this.#flushQueued = false;
        try {
          this.write(() => undefined);
        } catch {
          // Each deferred write was rejected with the error already.
        }
      });
    });
  }

  /** Runs the deferred writes and then `fn` in one `BEGIN IMMEDIATE` transaction. */
  write<T>(fn: () => T): T {
    if (this.#synchronous === 'full' || this.#db.inTransaction) return this.#write(fn);
    // 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA: only ever lowered to NORMAL, and put back after.
    const level = Number(prepared(this.#db, 'PRAGMA synchronous', 'column').get());
    if (!(level > 1)) return this.#write(fn);
    prepared(this.#db, 'PRAGMA synchronous = NORMAL').run();
    try {
      return this.#write(fn);
    } finally {
      prepared(
        this.#db,
        level === 3 ? 'PRAGMA synchronous = EXTRA' : 'PRAGMA synchronous = FULL',
      ).run();
    }
  }

  #write<T>(fn: () => T): T {
    const waiting = this.#waiting.splice(0);
    if (waiting.length === 0) return immediate(this.#db, fn);
    let done: { results: number[][]; value: T };
    try {
      done = immediate(this.#db, () => ({ results: waiting.map((w) => w.apply()), value: fn() }));
    } catch (error) {
      if (isBusy(error)) {
        for (const w of waiting) w.reject(error);
        throw error;
      }
      for (const w of waiting) {
        try {
          w.resolve(immediate(this.#db, w.apply));
        } catch (alone) {
          w.reject(alone);
        }
      }
      return immediate(this.#db, fn);
    }
    waiting.forEach((w, i) => w.resolve(done.results[i]!));
    return done.value;
  }
}

/** SQLite could not take the write lock within the connection's busy timeout. */
function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('SQLITE_BUSY');
}
