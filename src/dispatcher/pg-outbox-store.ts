import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { JsonValue } from '../core/message.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { claimSql } from '../sql/claim.js';
import type { CommitMode } from '../sql/commit-mode.js';
import { releaseSql, settleDoneSql, settleFailedSql } from '../sql/settle.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { ClaimRequest, OutboxStore, Settlement } from './outbox-store.js';

interface ClaimedRow {
  rowId: string;
  id: string;
  topic: string;
  aggregateId: string;
  sequence: string;
  payload: JsonValue;
  headers: Record<string, string>;
  createdAt: Date | string;
  attempts: number;
  shadow: boolean;
}

/** Options of {@link PgOutboxStore}. */
export interface PgOutboxStoreOptions {
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  /**
   * How settles and releases commit (sql/commit-mode.ts; claims always wait for the flush).
   * Default `sync` here; dispatchers pass theirs.
   */
  settleCommit?: CommitMode;
}

/**
 * {@link OutboxStore} on Postgres. Every method is ONE statement, so `executor` may be a pool
 * (`fromPg(pool)`): no method needs a session.
 */
export class PgOutboxStore implements OutboxStore {
  readonly #executor: SqlExecutor;
  readonly #claimSql: string;
  readonly #settleFailedSql: string;
  readonly #settleDoneSql: string;
  readonly #releaseSql: string;

  constructor(executor: SqlExecutor, options: PgOutboxStoreOptions = {}) {
    const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
    const commit = options.settleCommit ?? 'sync';
    this.#executor = executor;
    this.#claimSql = claimSql(schema);
    // Neither is prepared (statement-name.ts): a generic plan made while the outbox is small can
    // be a sequential scan, and it stays while the table grows.
    this.#settleFailedSql = settleFailedSql(schema, commit);
    this.#settleDoneSql = settleDoneSql(schema, commit);
    this.#releaseSql = releaseSql(schema, commit);
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    const { rows } = await this.#executor.query<ClaimedRow>(this.#claimSql, [
      request.owner,
      request.batchSize,
      request.unorderedPatterns,
      request.deadLettersBlock,
      request.leaseMs,
    ]);
    return rows.map((row) => ({
      id: row.id,
      rowId: String(row.rowId),
      topic: row.topic,
      aggregateId: row.aggregateId,
      sequence: Number(row.sequence),
      payload: row.payload,
      headers: row.headers,
      createdAt: row.createdAt instanceof Date ? row.createdAt : new Date(row.createdAt),
      attempts: Number(row.attempts),
      ...(row.shadow ? { shadow: true } : {}),
    }));
  }

  async settle(owner: string, settlements: readonly Settlement[]): Promise<string[]> {
    // Messages that went out take the one-table statement; failures (normally few) the jsonb
    // one (sql/settle.ts). A batch with both runs two statements: each row's settle stands alone
    // (fenced by its lease), so they need not commit together.
    const done: string[] = [];
    const failed: Extract<Settlement, { kind: 'retry' | 'dead' }>[] = [];
    for (const s of settlements)
      if (s.kind === 'published' || s.kind === 'shadow') done.push(s.rowId);
      else failed.push(s);
    const settled: string[] = [];
    if (done.length > 0) {
      const { rows } = await this.#executor.query<{ id: string }>(this.#settleDoneSql, [
        owner,
        done,
      ]);
      for (const row of rows) settled.push(String(row.id));
    }
    if (failed.length > 0) {
      const records = failed.map((s) => ({
        id: s.rowId,
        kind: s.kind,
        error: s.error,
        delayMs: s.kind === 'retry' ? s.delayMs : null,
      }));
      const { rows } = await this.#executor.query<{ id: string }>(this.#settleFailedSql, [
        owner,
        JSON.stringify(records),
        records.map((r) => r.id),
      ]);
      for (const row of rows) settled.push(String(row.id));
    }
    return settled;
  }

  async release(owner: string, rowIds: readonly string[]): Promise<void> {
    if (rowIds.length === 0) return;
    await this.#executor.query(this.#releaseSql, [owner, rowIds]);
  }
}
