import type { JsonValue } from '../core/message.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { claimSql, globToSqliteGlob } from './claim-sql.js';
import type { D1Db } from './d1-types.js';
import { releaseSql, settleSql } from './settle-sql.js';

interface ClaimedRow {
  rowId: number;
  id: string;
  topic: string;
  aggregateId: string;
  sequence: number;
  payload: string;
  headers: string;
  createdAt: number;
  attempts: number;
  availableAt: number;
}

/**
 * The dispatcher's {@link OutboxStore} on D1: the same contract as `PgOutboxStore` (lease claim,
 * fenced settle, release), so the Postgres dispatcher's settlement planning applies unchanged.
 * `unorderedPatterns` are topic globs (`mail.*`), not LIKE patterns.
 */
export class D1OutboxStore implements OutboxStore {
  readonly #db: D1Db;
  readonly #now: () => number;

  /** `now` is the clock in ms since the epoch (default `Date.now`); tests inject one. */
  constructor(db: D1Db, now: () => number = Date.now) {
    this.#db = db;
    this.#now = now;
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    const { results } = await this.#db
      .prepare(claimSql)
      .bind(
        request.owner,
        this.#now(),
        request.leaseMs,
        request.batchSize,
        JSON.stringify((request.unorderedPatterns ?? []).map(globToSqliteGlob)),
        request.deadLettersBlock ? 1 : 0,
      )
      .all<ClaimedRow>();
    // RETURNING has no defined order in SQLite: restore the claim's due order.
    const rows = [...results].sort(
      (a, b) => a.availableAt - b.availableAt || Number(a.rowId) - Number(b.rowId),
    );
    return rows.map((row) => ({
      id: row.id,
      rowId: String(row.rowId),
      topic: row.topic,
      aggregateId: row.aggregateId,
      sequence: Number(row.sequence),
      payload: JSON.parse(row.payload) as JsonValue,
      headers: JSON.parse(row.headers) as Record<string, string>,
      createdAt: new Date(Number(row.createdAt)),
      attempts: Number(row.attempts),
    }));
  }

  async settle(
    owner: string,
    all: readonly Settlement[],
    _request?: SettleRequest,
  ): Promise<SettleResult> {
    // Never deferred: D1 runs one statement at a time, so no writer is ever mid-transaction.
    const released = all.filter((s) => s.kind === 'release').map((s) => s.rowId);
    if (released.length > 0) await this.release(owner, released);
    const settlements = all.filter((s) => s.kind !== 'release');
    if (settlements.length === 0) return { settled: released, deferred: [] };
    const decisions = settlements.map((s) => ({
      id: Number(s.rowId),
      // `shadow` (retrofit shadow mode) is never claimed from D1, which rejects shadow messages.
      kind: s.kind === 'shadow' ? 'published' : s.kind,
      error: 'error' in s ? s.error : null,
      delayMs: s.kind === 'retry' ? Math.max(0, Math.round(s.delayMs)) : 0,
    }));
    const { results } = await this.#db
      .prepare(settleSql)
      .bind(owner, JSON.stringify(decisions), this.#now())
      .all<{ id: number }>();
    return { settled: [...released, ...results.map((row) => String(row.id))], deferred: [] };
  }

  async release(owner: string, rowIds: readonly string[]): Promise<void> {
    if (rowIds.length === 0) return;
    await this.#db
      .prepare(releaseSql)
      .bind(owner, JSON.stringify(rowIds.map(Number)))
      .run();
  }
}
