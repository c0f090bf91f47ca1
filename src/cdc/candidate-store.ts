import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../dispatcher/outbox-store.js';
import { PgOutboxStore, type PgOutboxStoreOptions } from '../dispatcher/pg-outbox-store.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * The {@link OutboxStore} of the CDC dispatcher's WAL-driven worker: `PgOutboxStore` unchanged —
 * the polling claim, settle and release — plus the rows the WAL announced and that are not
 * settled yet (the candidates), and a report of the rows each settle finished. A commit wakes
 * the worker and its claim takes whatever is due, at the polling claim's cost (sql/cdc.ts says
 * why the claim is not restricted to the candidates); the candidates only decide how far the
 * slot may be confirmed. So a CDC dispatcher claims, publishes and settles exactly like a polling
 * one, through the polling dispatcher's own code path (`drain()`).
 */
export class CandidateStore implements OutboxStore {
  readonly #inner: PgOutboxStore;
  /** Row ids announced by the WAL and not settled yet. Insertion order = commit order. */
  readonly candidates = new Set<string>();

  constructor(executor: SqlExecutor, options: PgOutboxStoreOptions) {
    this.#inner = new PgOutboxStore(executor, options);
  }

  claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    return this.#reported(this.#inner.claim(request));
  }

  /**
   * Called with every error of a claim, settle or release — including the settle retries the
   * dispatcher makes without an event — so the CDC dispatcher sees at once that the database is
   * going away (see `PgCdcDispatcher#onDatabaseError`).
   */
  onError: (error: unknown) => void = () => undefined;

  async #reported<T>(work: Promise<T>): Promise<T> {
    try {
      return await work;
    } catch (error) {
      this.onError(error);
      throw error;
    }
  }

  /**
   * Called with the rows a settle just resolved: finished for good (published, dead-lettered,
   * shadowed) or recorded as failed (retry: `last_error`, `available_at`), so the dispatcher can
   * drop them and confirm their WAL position without reading their state back — one round trip
   * less per cycle, on the path of every message waiting behind them. Released rows (never
   * tried) are not resolved: they are still to be published.
   */
  onResolved: (rowIds: string[]) => void = () => undefined;

  /**
   * Called after a settle that recorded retries, with the shortest of their backoffs: each row
   * is due that long after the settle ran, which is before it returned here. The dispatcher
   * claims again then. Reported by the settle itself because any later look at the table ("what
   * falls due next?") can come after the backoff ran out, and then finds nothing.
   */
  onRetried: (delayMs: number) => void = () => undefined;

  async settle(
    owner: string,
    settlements: readonly Settlement[],
    request: SettleRequest,
  ): Promise<SettleResult> {
    const result = await this.#reported(this.#inner.settle(owner, settlements, request));
    const done = new Set(result.settled);
    const resolved = settlements
      .filter((s) => s.kind !== 'release' && done.has(s.rowId))
      .map((s) => s.rowId);
    if (resolved.length > 0) this.onResolved(resolved);
    let retryInMs = Infinity;
    for (const s of settlements)
      if (s.kind === 'retry' && done.has(s.rowId)) retryInMs = Math.min(retryInMs, s.delayMs);
    if (retryInMs < Infinity) this.onRetried(retryInMs);
    return result;
  }

  release(owner: string, rowIds: readonly string[]): Promise<void> {
    return this.#reported(this.#inner.release(owner, rowIds));
  }
}
