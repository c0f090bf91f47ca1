import { immediate, type SqliteDatabase } from './sqlite-database.js';

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
 * Failures stay apart. When the write lock cannot be had (SQLITE_BUSY after the busy timeout),
 * every write of the transaction fails with that error, as each would have alone (the dispatcher
 * retries settles while their lease lasts, claims with backoff). When the transaction fails
 * inside, it was rolled back whole, and each write runs again in a transaction of its own, so a
 * settle never fails because of a claim's error, nor the other way round.
 */
export class SqliteWriteQueue {
  readonly #db: SqliteDatabase;
  readonly #waiting: DeferredWrite[] = [];
  #flushQueued = false;

  constructor(db: SqliteDatabase) {
    this.#db = db;
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
