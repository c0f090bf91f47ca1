import type { JsonValue } from '../../core/message.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../../dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../../publishers/publisher.js';
import { claimSql } from '../../sql/sqlite/claim.js';
import {
  markNextReadySql,
  releaseSql,
  settleParameters,
  settlePublishedSql,
  settleSql,
} from '../../sql/sqlite/settle.js';
import { immediate, numbered, prepared, type SqliteDatabase } from './sqlite-database.js';

/**
 * A claimed row as an array, in the order of claimSql's RETURNING list: row id, message id, topic,
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
 * statements (src/sql/sqlite), each claim and each settle in a `BEGIN IMMEDIATE` transaction.
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
  /**
   * Row ids of unordered messages this store claimed and has not settled: their leaving moves no
   * chain, so the settle skips the head probe for them (half a settle's cost on an unordered
   * batch, measured in bench/cases/sqlite.ts). A row missing here is probed: always safe.
   */
  readonly #unordered = new Set<string>();

  /** `now` is the clock in ms since the epoch (default `Date.now`); tests inject one. */
  constructor(db: SqliteDatabase, now: () => number = Date.now) {
    this.#db = db;
    this.#now = now;
  }

  claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    return attempt(() => {
      const results = immediate(
        this.#db,
        () =>
          prepared(this.#db, claimSql, true).all(
            numbered([request.owner, this.#now(), request.leaseMs, request.batchSize]),
          ) as ClaimedRow[],
      );
      // RETURNING has no defined order in SQLite: restore the claim's due order (lanes are
      // sorted by sequence when they are published).
      results.sort((a, b) => a[10] - b[10] || a[0] - b[0]);
      // Claims whose settle failed never remove their rows; forgetting them all is safe.
      if (this.#unordered.size > 100_000) this.#unordered.clear();
      return results.map((row) => {
        const rowId = String(row[0]);
        const unordered = Number(row[5]) === 0;
        if (unordered) this.#unordered.add(rowId);
        return {
          id: row[1],
          rowId,
          topic: row[2],
          aggregateId: row[3],
          sequence: Number(row[4]),
          ...(unordered ? { ordered: false } : {}),
          payload: JSON.parse(row[6]) as JsonValue,
          headers: JSON.parse(row[7]) as Record<string, string>,
          createdAt: new Date(Number(row[8])),
          attempts: Number(row[9]),
        };
      });
    });
  }

  /**
   * Settles, releases and moves chains on in ONE transaction (src/sql/sqlite/settle.ts): the
   * published rows with the plain statement, the other decisions with the general one.
   */
  settle(
    owner: string,
    settlements: readonly Settlement[],
    request: Pick<SettleRequest, 'deadLettersBlock'> = { deadLettersBlock: true },
  ): Promise<SettleResult> {
    return attempt(() => {
      // Published rows (nearly every row) straight to the plain statement's id list; the rest
      // through the shared planning of the general settle.
      const published: number[] = [];
      const leaving: number[] = [];
      const rest: Settlement[] = [];
      for (const s of settlements) {
        if (s.kind === 'published') {
          const id = Number(s.rowId);
          published.push(id);
          if (!this.#unordered.has(s.rowId)) leaving.push(id);
        } else rest.push(s);
        this.#unordered.delete(s.rowId);
      }
      const {
        decisions,
        released,
        leaving: restLeaving,
      } = settleParameters(rest, request.deadLettersBlock);
      leaving.push(...restLeaving);
      if (published.length + decisions.length + released.length === 0)
        return { settled: [], deferred: [] };
      const now = this.#now();
      const settled = immediate(this.#db, () => {
        const ids: number[] = [];
        const collect = (sql: string, values: unknown[]) => {
          for (const row of prepared(this.#db, sql, true).all(numbered(values)) as [number][])
            ids.push(row[0]);
        };
        if (published.length > 0)
          collect(settlePublishedSql, [owner, JSON.stringify(published), now]);
        if (decisions.length > 0) collect(settleSql, [owner, JSON.stringify(decisions), now]);
        if (released.length > 0) collect(releaseSql, [owner, JSON.stringify(released)]);
        if (leaving.length > 0)
          prepared(this.#db, markNextReadySql).run(numbered([JSON.stringify(leaving)]));
        return ids;
      });
      return { settled: settled.map(String), deferred: [] };
    });
  }

  release(owner: string, rowIds: readonly string[]): Promise<void> {
    return attempt(() => {
      if (rowIds.length === 0) return;
      immediate(this.#db, () =>
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
