import type { JsonValue } from '../../core/message.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../../dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../../publishers/publisher.js';
import { claimHeadsSql, claimSql } from '../../sql/sqlite/claim.js';
import {
  markNextReadySql,
  releaseSql,
  settleParameters,
  settlePublishedSql,
  settleSql,
} from '../../sql/sqlite/settle.js';
import { numbered, prepared, type SqliteDatabase } from './sqlite-database.js';
import { runsPayOffAfter } from './runs-pay-off.js';
import { SqliteWriteQueue, type DispatchSynchronous } from './sqlite-write-queue.js';

/**
 * A claimed row as an array, in the order of the claims' RETURNING list: row id, message id, topic,
 * aggregate id, sequence, ordered, payload, headers, created_at, attempts, available_at.
 */
type ClaimedRow = [
  rowId: number,
  id: string,
  topic: string,
  aggregateId: string,
  sequence: number,
  ordered: number,
  payload: string,
  headers: string,
  createdAt: number,
  attempts: number,
  availableAt: number,
];

/**
 * The dispatcher's {@link OutboxStore} on a SQLite file (better-sqlite3): the D1 store's
 * statements (src/sql/sqlite), each claim in a `BEGIN IMMEDIATE` transaction that first commits
 * the settle of the batch before it (sqlite-write-queue.ts).
 *
 * Several dispatcher processes on one file stay apart by leases, not row locks: SQLite has none,
 * and needs none — it runs one write transaction at a time for the whole file, so a claim's
 * choice of rows and its lease commit before another claim reads (claim.ts). A settle is fenced
 * by the claim's lease token, so a dispatcher whose lease expired changes nothing. The writer
 * decides `ordered` and `ready` exactly for the same reason, so settles never defer.
 *
 * better-sqlite3 is synchronous: a claim waiting for another process's write lock (up to the
 * connection's `busy_timeout`) holds this process's event loop. Give the dispatcher a connection
 * of its own, not the one an HTTP server answers on.
 */
export class SqliteOutboxStore implements OutboxStore {
  readonly #db: SqliteDatabase;
  readonly #now: () => number;
  readonly #writes: SqliteWriteQueue;
  /**
   * Per claim this store made and has not settled (by lease owner): the row ids of its ordered
   * messages. Only those move a chain when published, so the settle probes for the next head of
   * their aggregates alone (half a settle's cost on an unordered batch, measured in
   * bench/cases/sqlite.ts). A claim missing here (settled twice, forgotten) has every row probed:
   * always safe.
   */
  readonly #orderedRows = new Map<string, Set<string>>();
  /**
   * Whether the next claim takes runs (`claimSql`) or heads only (`claimHeadsSql`, claim.ts),
   * decided from the last claim (see {@link runsPayOff}). Starts true.
   */
  #runs = true;

  /**
   * `now` is the clock in ms since the epoch (default `Date.now`); tests inject one.
   * `synchronous`: whether this store's commits wait for a flush (sqlite-write-queue.ts).
   */
  constructor(
    db: SqliteDatabase,
    now: () => number = Date.now,
    synchronous: DispatchSynchronous = 'normal',
  ) {
    this.#db = db;
    this.#now = now;
    this.#writes = new SqliteWriteQueue(db, synchronous);
  }

  claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    return attempt(() => {
      const sql = this.#runs ? claimSql : claimHeadsSql;
      const results = this.#writes.write(
        () =>
          prepared(this.#db, sql, 'arrays').all(
            numbered([request.owner, this.#now(), request.leaseMs, request.batchSize]),
          ) as ClaimedRow[],
      );
      // RETURNING has no defined order in SQLite: restore the claim's due order (lanes are
      // sorted by sequence when they are published).
      results.sort((a, b) => a[10] - b[10] || a[0] - b[0]);
      // Claims whose settle failed are never removed; forgetting them all is safe.
      if (this.#orderedRows.size > 10_000) this.#orderedRows.clear();
      const ordered = new Set<string>();
      const messages = results.map((row): OutgoingMessage => {
        const message: OutgoingMessage = {
          id: row[1],
          rowId: String(row[0]),
          topic: row[2],
          aggregateId: row[3],
          sequence: Number(row[4]),
          payload: JSON.parse(row[6]) as JsonValue,
          headers: JSON.parse(row[7]) as Record<string, string>,
          createdAt: new Date(Number(row[8])),
          attempts: Number(row[9]),
        };
        if (Number(row[5]) === 0) message.ordered = false;
        else ordered.add(message.rowId);
        return message;
      });
      this.#orderedRows.set(request.owner, ordered);
      this.#runs = runsPayOffAfter(request.batchSize, messages);
      return messages;
    });
  }

  /**
   * Settles, releases and moves chains on in one transaction (src/sql/sqlite/settle.ts): the
   * published rows with the plain statement, the other decisions with the general one. The
   * statements are planned now and committed with this store's next claim or release, or on
   * their own once the current turn of the event loop is over (sqlite-write-queue.ts); the
   * promise resolves once they are committed.
   */
  settle(
    owner: string,
    settlements: readonly Settlement[],
    request: Pick<SettleRequest, 'deadLettersBlock'> = { deadLettersBlock: true },
  ): Promise<SettleResult> {
    let apply: (() => number[]) | undefined;
    try {
      apply = this.#planSettle(owner, settlements, request.deadLettersBlock);
    } catch (error) {
      return Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    if (!apply) return Promise.resolve({ settled: [], deferred: [] });
    return this.#writes.defer(apply).then((ids) => ({ settled: ids.map(String), deferred: [] }));
  }

  /** The statements of one settle, as a function to run in a transaction; undefined: none. */
  #planSettle(
    owner: string,
    settlements: readonly Settlement[],
    deadLettersBlock: boolean,
  ): (() => number[]) | undefined {
    const ordered = this.#orderedRows.get(owner);
    this.#orderedRows.delete(owner);
    // Published rows (nearly every row) straight to the plain statement's id list; the rest
    // through the shared planning of the general settle.
    const published: number[] = [];
    const leaving: number[] = [];
    const rest: Settlement[] = [];
    for (const s of settlements) {
      if (s.kind !== 'published') {
        rest.push(s);
        continue;
      }
      const id = Number(s.rowId);
      published.push(id);
      if (!ordered || ordered.has(s.rowId)) leaving.push(id);
    }
    const { decisions, released, leaving: restLeaving } = settleParameters(rest, deadLettersBlock);
    leaving.push(...restLeaving);
    if (published.length + decisions.length + released.length === 0) return undefined;
    const now = this.#now();
    return () => {
      const ids: number[] = [];
      const collect = (sql: string, values: unknown[]) => {
        for (const id of prepared(this.#db, sql, 'column').all(numbered(values)) as number[])
          ids.push(id);
      };
      if (published.length > 0)
        collect(settlePublishedSql, [owner, JSON.stringify(published), now]);
      if (decisions.length > 0) collect(settleSql, [owner, JSON.stringify(decisions), now]);
      if (released.length > 0) collect(releaseSql, [owner, JSON.stringify(released)]);
      if (leaving.length > 0)
        prepared(this.#db, markNextReadySql).run(numbered([JSON.stringify(leaving)]));
      return ids;
    };
  }

  release(owner: string, rowIds: readonly string[]): Promise<void> {
    return attempt(() => {
      this.#orderedRows.delete(owner);
      if (rowIds.length === 0) return;
      this.#writes.write(() =>
        prepared(this.#db, releaseSql).run(numbered([owner, JSON.stringify(rowIds.map(Number))])),
      );
    });
  }
}

/** A synchronous call as a promise: a thrown error (SQLITE_BUSY, a closed file) rejects it. */
function attempt<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error instanceof Error ? error : new Error(String(error)));
  }
}
