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
  settleSql,
} from '../../sql/sqlite/settle.js';
import { immediate, numbered, prepared, type SqliteDatabase } from './sqlite-database.js';

interface ClaimedRow {
  rowId: number;
  id: string;
  topic: string;
  aggregateId: string;
  sequence: number;
  ordered: number;
  payload: string;
  headers: string;
  createdAt: number;
  attempts: number;
  availableAt: number;
}

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
          prepared(this.#db, claimSql).all(
            numbered([request.owner, this.#now(), request.leaseMs, request.batchSize]),
          ) as ClaimedRow[],
      );
      // RETURNING has no defined order in SQLite: restore the claim's due order (lanes are
      // sorted by sequence when they are published).
      results.sort((a, b) => a.availableAt - b.availableAt || a.rowId - b.rowId);
      return results.map((row) => ({
        id: row.id,
        rowId: String(row.rowId),
        topic: row.topic,
        aggregateId: row.aggregateId,
        sequence: Number(row.sequence),
        ...(Number(row.ordered) === 0 ? { ordered: false } : {}),
        payload: JSON.parse(row.payload) as JsonValue,
        headers: JSON.parse(row.headers) as Record<string, string>,
        createdAt: new Date(Number(row.createdAt)),
        attempts: Number(row.attempts),
      }));
    });
  }

  /** Settles, releases and moves chains on in ONE transaction (src/sql/sqlite/settle.ts). */
  settle(
    owner: string,
    settlements: readonly Settlement[],
    request: Pick<SettleRequest, 'deadLettersBlock'> = { deadLettersBlock: true },
  ): Promise<SettleResult> {
    return attempt(() => {
      const { decisions, released, leaving } = settleParameters(
        settlements,
        request.deadLettersBlock,
      );
      if (decisions.length + released.length === 0) return { settled: [], deferred: [] };
      const settled = immediate(this.#db, () => {
        const rows: { id: number }[] = [];
        if (decisions.length > 0)
          rows.push(
            ...(prepared(this.#db, settleSql).all(
              numbered([owner, JSON.stringify(decisions), this.#now()]),
            ) as { id: number }[]),
          );
        if (released.length > 0)
          rows.push(
            ...(prepared(this.#db, releaseSql).all(numbered([owner, JSON.stringify(released)])) as {
              id: number;
            }[]),
          );
        if (leaving.length > 0)
          prepared(this.#db, markNextReadySql).run(numbered([JSON.stringify(leaving)]));
        return rows;
      });
      return { settled: settled.map((row) => String(row.id)), deferred: [] };
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
