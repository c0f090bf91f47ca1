import type { JsonValue } from '../core/message.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { claimHeadsSql, claimSql, nextDueSql } from '../sql/sqlite/claim.js';
import { runsPayOffAfter } from '../stores/sqlite/runs-pay-off.js';
import type { D1Db, D1Statement } from './d1-types.js';
import { markNextReadySql, releaseSql, settleParameters, settleSql } from '../sql/sqlite/settle.js';

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
 * The dispatcher's {@link OutboxStore} on D1: the same contract as `PgOutboxStore` (lease claim
 * of ready heads and the runs behind them, fenced settle that moves each aggregate's chain on,
 * release), so the shared settlement planning and ordered publishing apply unchanged.
 *
 * Whether a message is ordered was decided when it was written (D1 migration 2), as in Postgres.
 */
export class D1OutboxStore implements OutboxStore {
  readonly #db: D1Db;
  readonly #now: () => number;
  /**
   * Whether the next claim takes runs (`claimSql`) or heads only (`claimHeadsSql`), decided from
   * the last claim of this store (runs-pay-off.ts): heads only reads 1,400 rows instead of 2,401
   * for 200 heads. Starts true, so a store made per run begins as before.
   */
  #runs = true;

  /** `now` is the clock in ms since the epoch (default `Date.now`); tests inject one. */
  constructor(db: D1Db, now: () => number = Date.now) {
    this.#db = db;
    this.#now = now;
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    const { results } = await this.#db
      .prepare(this.#runs ? claimSql : claimHeadsSql)
      .bind(request.owner, this.#now(), request.leaseMs, request.batchSize)
      .all<ClaimedRow>();
    // RETURNING has no defined order in SQLite: restore the claim's due order (lanes are sorted
    // by sequence when they are published).
    const rows = [...results].sort(
      (a, b) => a.availableAt - b.availableAt || Number(a.rowId) - Number(b.rowId),
    );
    const messages = rows.map((row): OutgoingMessage => ({
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
    this.#runs = runsPayOffAfter(request.batchSize, messages);
    return messages;
  }

  /**
   * Settles, releases and moves chains on in ONE batch (src/sql/sqlite/settle.ts). Never defers: D1 runs one
   * write transaction at a time, so no writer is ever mid-transaction here. `request` defaults to
   * the `hold` policy.
   */
  async settle(
    owner: string,
    settlements: readonly Settlement[],
    request: Pick<SettleRequest, 'deadLettersBlock'> = { deadLettersBlock: true },
  ): Promise<SettleResult> {
    const { decisions, released, leaving } = settleParameters(
      settlements,
      request.deadLettersBlock,
    );
    const statements: D1Statement[] = [];
    if (decisions.length > 0)
      statements.push(
        this.#db.prepare(settleSql).bind(owner, JSON.stringify(decisions), this.#now()),
      );
    if (released.length > 0)
      statements.push(this.#db.prepare(releaseSql).bind(owner, JSON.stringify(released)));
    if (leaving.length > 0)
      statements.push(this.#db.prepare(markNextReadySql).bind(JSON.stringify(leaving)));
    if (statements.length === 0) return { settled: [], deferred: [] };
    const results = await this.#db.batch<{ id: number }>(statements);
    const settled = results
      .slice(0, (decisions.length > 0 ? 1 : 0) + (released.length > 0 ? 1 : 0))
      .flatMap((result) => result.results.map((row) => String(row.id)));
    return { settled, deferred: [] };
  }

  async release(owner: string, rowIds: readonly string[]): Promise<void> {
    if (rowIds.length === 0) return;
    await this.#db
      .prepare(releaseSql)
      .bind(owner, JSON.stringify(rowIds.map(Number)))
      .run();
  }

  /** When the next ready message becomes due after `after` (ms; default now), if any. */
  async nextDueAt(after: number = this.#now()): Promise<number | undefined> {
    const row = await this.#db.prepare(nextDueSql).bind(after).first<{ dueAt: number | null }>();
    return row?.dueAt == null ? undefined : Number(row.dueAt);
  }
}
