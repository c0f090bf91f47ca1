import { quoteIdentifier } from '../core/identifier.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../dispatcher/outbox-store.js';
import { PgOutboxStore } from '../dispatcher/pg-outbox-store.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { claimSql } from '../sql/claim.js';
import type { CommitMode } from '../sql/commit-mode.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * An {@link OutboxStore} whose claims start only from the rows the WAL announced (the candidates):
 * the polling claim with one extra predicate on its heads, `o.id = ANY($4)` (sql/claim.ts). A
 * candidate behind its aggregate's head is reached the way the polling claim reaches it — in the
 * head's run, or once the settle before it marks it ready. Everything else — the row mapping,
 * settle, release — is `PgOutboxStore`'s, unchanged, so a CDC dispatcher claims, publishes and
 * settles exactly like a polling one, through the polling dispatcher's own code path (`drain()`).
 */
export class CandidateStore implements OutboxStore {
  readonly #inner: PgOutboxStore;
  /** Row ids announced by the WAL and not yet done. Insertion order = commit order. */
  readonly candidates = new Set<string>();

  constructor(executor: SqlExecutor, schema: string, settleCommit: CommitMode = 'sync') {
    const claim = claimSql(quoteIdentifier(schema), { restrictTo: true });
    this.#inner = new PgOutboxStore(executor, { schema, settleCommit, claimSql: claim });
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    if (this.candidates.size === 0) return [];
    return this.#inner.claim(request, [[...this.candidates]]);
  }

  /**
   * Called with the rows a settle just finished for good (published, dead-lettered, shadowed),
   * so the dispatcher can drop them and confirm their WAL position without reading their state
   * back: one round trip less per cycle, on the path of every message waiting behind it.
   */
  onFinished: (rowIds: string[]) => void = () => undefined;

  async settle(
    owner: string,
    settlements: readonly Settlement[],
    request: SettleRequest,
  ): Promise<SettleResult> {
    const result = await this.#inner.settle(owner, settlements, request);
    const done = new Set(result.settled);
    const finished = settlements
      .filter((s) => s.kind !== 'retry' && s.kind !== 'release' && done.has(s.rowId))
      .map((s) => s.rowId);
    if (finished.length > 0) this.onFinished(finished);
    return result;
  }

  release(owner: string, rowIds: readonly string[]): Promise<void> {
    return this.#inner.release(owner, rowIds);
  }
}
