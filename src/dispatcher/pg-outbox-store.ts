import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { JsonValue } from '../core/message.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { expireSql } from '../sql/approvals.js';
import { claimSql } from '../sql/claim.js';
import { claimCommitClause, type CommitMode } from '../sql/commit-mode.js';
import { deferSql } from '../sql/defer.js';
import { releaseSql, settleAdvanceSql, settleFailedSql } from '../sql/settle.js';
import { runsFirstTenantClaimSql, tenantClaimSql } from '../sql/tenant-claim.js';
import type { QueryOptions, SqlExecutor } from '../store/sql-executor.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from './outbox-store.js';

interface ClaimedRow {
  rowId: string;
  id: string;
  topic: string;
  aggregateId: string;
  sequence: string;
  ordered: boolean;
  payload: JsonValue;
  headers: Record<string, string>;
  createdAt: Date | string;
  attempts: number;
  shadow: boolean;
  /** The last tenant the claim visited (sql/tenant-claim.ts), the same on every row. */
  tenantCursor?: string | null;
}

/** Options of {@link PgOutboxStore}. */
export interface PgOutboxStoreOptions {
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  /**
   * How settles and releases commit (sql/commit-mode.ts). Default `sync` here; dispatchers pass
   * theirs.
   */
  settleCommit?: CommitMode;
  /**
   * How claims commit: `async` skips the WAL flush wait and holds claims back for a lease after
   * a crash recovery (sql/commit-mode.ts `claimCommitClause`). Default `sync`; dispatchers pass
   * theirs.
   */
  claimCommit?: CommitMode;
  /**
   * How often a claim first expires held messages whose approval expired (migration 010), in ms.
   * Default 30 000. See {@link PgOutboxStore}.
   */
  approvalSweepIntervalMs?: number;
  /**
   * Passed to the executor with every statement (`QueryOptions.timeoutMs`): see
   * `DispatcherOptions.statementTimeoutMs`. Default none (`0`).
   */
  statementTimeoutMs?: number;
  /**
   * Share each claim's batch between the tenants with due messages (their `tenant_id` header):
   * one tenant's burst then costs another about a claim of waiting, not the whole burst
   * (sql/tenant-claim.ts). Default `true`. `false`: oldest due first, whatever the tenant (the
   * claim of schema version 15 and before).
   */
  tenantShares?: boolean;
}

/** Most held messages one expiry sweep decides. */
const EXPIRY_BATCH = 100;

/**
 * {@link OutboxStore} on Postgres. Every method is ONE statement, so `executor` may be a pool
 * (`fromPg(pool)`): no method needs a session.
 *
 * Claims share each batch between the tenants with due messages (`tenant_id` header, see
 * sql/tenant-claim.ts): the store keeps the round-robin cursor, the last tenant its previous claim
 * visited, so one store (one dispatcher) goes round all tenants whatever their number.
 *
 * Expiry of held messages (issue 20) is applied here, at claim time: before a claim, at most every
 * `approvalSweepIntervalMs` (again at once after a full batch of 100), one statement expires
 * overdue held messages with the claim's dead-letter policy (sql/approvals.ts `expireSql`) — one
 * probe of a partial index that holds only undecided messages when none is overdue. A dispatcher
 * is where the policy is known, and the claim is where every dispatcher passes. A sweep that fails
 * does not fail the claim; the next interval tries again.
 */
export class PgOutboxStore implements OutboxStore {
  readonly #executor: SqlExecutor;
  readonly #claimSql: string;
  readonly #runsFirstClaimSql: string;
  /** Set once the runs-first claim (migration 019) turned out not to exist: a schema behind. */
  #runsFirstMissing = false;
  readonly #tenantShares: boolean;
  readonly #settleFailedSql: string;
  readonly #settleAdvanceSql: string;
  readonly #releaseSql: string;
  readonly #deferSql: string;
  readonly #expireSql: string;
  readonly #approvalSweepMs: number;
  readonly #queryOptions: QueryOptions | undefined;
  #nextSweepAt = 0;
  /** Where the next claim's round of tenants starts (sql/tenant-claim.ts). */
  #tenantCursor: string | null = null;

  constructor(executor: SqlExecutor, options: PgOutboxStoreOptions = {}) {
    const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
    const commit = options.settleCommit ?? 'sync';
    this.#executor = executor;
    this.#tenantShares = options.tenantShares ?? true;
    const claimCommit = claimCommitClause(options.claimCommit ?? 'sync');
    this.#claimSql = (this.#tenantShares ? tenantClaimSql(schema) : claimSql(schema)) + claimCommit;
    this.#runsFirstClaimSql = runsFirstTenantClaimSql(schema) + claimCommit;
    // Neither is prepared (statement-name.ts): a generic plan made while the outbox is small can
    // be a sequential scan, and it stays while the table grows.
    this.#settleFailedSql = settleFailedSql(schema, commit);
    this.#settleAdvanceSql = settleAdvanceSql(schema, commit);
    this.#releaseSql = releaseSql(schema, commit);
    this.#deferSql = deferSql(schema);
    this.#expireSql = expireSql(schema);
    this.#approvalSweepMs = options.approvalSweepIntervalMs ?? 30_000;
    this.#queryOptions = options.statementTimeoutMs
      ? { timeoutMs: options.statementTimeoutMs }
      : undefined;
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    if (Date.now() >= this.#nextSweepAt) await this.#expireApprovals(request);
    const rows = await this.#claimRows(request);
    // No rows: nothing was due, so where the round stands does not matter.
    if (this.#tenantShares && rows.length > 0) this.#tenantCursor = rows[0]!.tenantCursor ?? null;
    return rows.map((row) => ({
      id: row.id,
      rowId: String(row.rowId),
      topic: row.topic,
      aggregateId: row.aggregateId,
      sequence: Number(row.sequence),
      ...(row.ordered ? {} : { ordered: false }),
      payload: row.payload,
      headers: row.headers,
      createdAt: row.createdAt instanceof Date ? row.createdAt : new Date(row.createdAt),
      attempts: Number(row.attempts),
      ...(row.shadow ? { shadow: true } : {}),
    }));
  }

  /**
   * The claim's rows: the runs-first claim (sql/runs-first-claim.ts) when the request asks for it
   * and tenant shares are on (it is an overload of the tenant claim), else the claim as before.
   * A database whose schema is behind migration 019 has no runs-first claim: then the claim as
   * before, from then on (a library user who upgraded the package before running the migration
   * keeps dispatching, heads first).
   */
  async #claimRows(request: ClaimRequest): Promise<ClaimedRow[]> {
    const base = [request.owner, request.batchSize, request.leaseMs];
    if (!this.#tenantShares)
      return (await this.#executor.query<ClaimedRow>(this.#claimSql, base, this.#queryOptions))
        .rows;
    if (request.maxHeads !== undefined && !this.#runsFirstMissing) {
      try {
        const { rows } = await this.#executor.query<ClaimedRow>(
          this.#runsFirstClaimSql,
          [...base, this.#tenantCursor, request.maxHeads],
          this.#queryOptions,
        );
        return rows;
      } catch (error) {
        // undefined_function: the five-argument outbox_claim is not there.
        if ((error as { code?: unknown }).code !== '42883') throw error;
        this.#runsFirstMissing = true;
      }
    }
    const { rows } = await this.#executor.query<ClaimedRow>(
      this.#claimSql,
      [...base, this.#tenantCursor],
      this.#queryOptions,
    );
    return rows;
  }

  async settle(
    owner: string,
    settlements: readonly Settlement[],
    request: SettleRequest,
  ): Promise<SettleResult> {
    // Four statements at most, each standing alone (every row's settle is fenced by its lease,
    // so they need not commit together): what leaves its chain and moves it on (published,
    // shadow, dead under skip), what stays at the head (retry, dead under hold), what was
    // never tried (release) and what waits for its route (defer, sql/defer.ts). Any order is safe; failures go first so that a retried head is
    // already backing off when its predecessors' settle makes it ready.
    const advance: string[] = [];
    const skipped: { id: string; error: string }[] = [];
    const failed: Extract<Settlement, { kind: 'retry' | 'dead' }>[] = [];
    const released: string[] = [];
    const deferred: Extract<Settlement, { kind: 'defer' }>[] = [];
    for (const s of settlements) {
      if (s.kind === 'published' || s.kind === 'shadow') advance.push(s.rowId);
      else if (s.kind === 'defer') deferred.push(s);
      else if (s.kind === 'release') released.push(s.rowId);
      else if (s.kind === 'dead' && !request.deadLettersBlock)
        skipped.push({ id: s.rowId, error: s.error });
      else failed.push(s);
    }
    const result: SettleResult = { settled: [], deferred: [] };
    if (failed.length > 0) {
      const records = failed.map((s) => ({
        id: s.rowId,
        kind: s.kind,
        error: s.error,
        delayMs: s.kind === 'retry' ? s.delayMs : null,
      }));
      const { rows } = await this.#executor.query<{ id: string }>(
        this.#settleFailedSql,
        [owner, JSON.stringify(records), records.map((r) => r.id)],
        this.#queryOptions,
      );
      for (const row of rows) result.settled.push(String(row.id));
    }
    if (advance.length > 0 || skipped.length > 0) {
      const { rows } = await this.#executor.query<{ id: string; state: string }>(
        this.#settleAdvanceSql,
        [owner, advance, skipped.map((s) => s.id), skipped.map((s) => s.error), request.leaseMs],
        this.#queryOptions,
      );
      for (const row of rows)
        (row.state === 'deferred' ? result.deferred : result.settled).push(String(row.id));
    }
    if (deferred.length > 0) {
      const { rows } = await this.#executor.query<{ id: string }>(
        this.#deferSql,
        [owner, deferred.map((s) => s.rowId), deferred.map((s) => s.delayMs)],
        this.#queryOptions,
      );
      for (const row of rows) result.settled.push(String(row.id));
    }
    if (released.length > 0) {
      const { rows } = await this.#executor.query<{ id: string }>(
        this.#releaseSql,
        [owner, released],
        this.#queryOptions,
      );
      for (const row of rows) result.settled.push(String(row.id));
    }
    return result;
  }

  async #expireApprovals(request: ClaimRequest): Promise<void> {
    this.#nextSweepAt = Date.now() + this.#approvalSweepMs;
    try {
      const { rows } = await this.#executor.query(
        this.#expireSql,
        [EXPIRY_BATCH, request.deadLettersBlock === false],
        this.#queryOptions,
      );
      if (rows.length === EXPIRY_BATCH) this.#nextSweepAt = 0;
    } catch {
      // The claim matters more; the next interval sweeps again.
    }
  }

  async release(owner: string, rowIds: readonly string[]): Promise<void> {
    if (rowIds.length === 0) return;
    await this.#executor.query(this.#releaseSql, [owner, rowIds], this.#queryOptions);
  }
}
