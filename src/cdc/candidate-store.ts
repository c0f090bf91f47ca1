import { quoteIdentifier } from '../core/identifier.js';
import type { ClaimRequest, OutboxStore, Settlement } from '../dispatcher/outbox-store.js';
import { PgOutboxStore } from '../dispatcher/pg-outbox-store.js';
import type { OutgoingMessage } from '../publishers/publisher.js';
import { claimSql } from '../sql/claim.js';
import type { CommitMode } from '../sql/commit-mode.js';
import { claimCandidatesSql } from '../sql/cdc.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * An {@link OutboxStore} whose claims only consider the rows the WAL announced (the candidates).
 * Everything else — the row mapping, settle, release — is `PgOutboxStore`'s, unchanged: the
 * store runs on an executor that swaps the polling claim for the candidate claim (the same
 * statement plus `o.id = ANY($6)`, see sql/cdc.ts) and appends the id list. So a CDC dispatcher
 * claims, publishes and settles exactly like a polling one, through the polling dispatcher's own
 * code path (`drain()`).
 */
export class CandidateStore implements OutboxStore {
  readonly #inner: PgOutboxStore;
  /** Row ids announced by the WAL and not yet done. Insertion order = commit order. */
  readonly candidates = new Set<string>();
  #rewrote = false;

  constructor(executor: SqlExecutor, schema: string, settleCommit: CommitMode = 'sync') {
    const pollingClaim = claimSql(quoteIdentifier(schema));
    const candidateClaim = claimCandidatesSql(pollingClaim);
    const rewriting: SqlExecutor = {
      query: (text, values) => {
        if (text !== pollingClaim) return executor.query(text, values);
        this.#rewrote = true;
        return executor.query(candidateClaim, [...(values ?? []), [...this.candidates]]);
      },
    };
    this.#inner = new PgOutboxStore(rewriting, { schema, settleCommit });
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    if (this.candidates.size === 0) return [];
    this.#rewrote = false;
    const claimed = await this.#inner.claim(request);
    // Never fall back to the unrestricted claim silently if PgOutboxStore's statement changes.
    if (!this.#rewrote) throw new Error('PgOutboxStore.claim no longer runs claimSql');
    return claimed;
  }

  /**
   * Called with the rows a settle just finished for good (published, dead-lettered, shadowed),
   * so the dispatcher can drop them and confirm their WAL position without reading their state
   * back: one round trip less per cycle, on the path of every message waiting behind it.
   */
  onFinished: (rowIds: string[]) => void = () => undefined;

  async settle(owner: string, settlements: readonly Settlement[]): Promise<string[]> {
    const settled = await this.#inner.settle(owner, settlements);
    const done = new Set(settled);
    const finished = settlements
      .filter((s) => s.kind !== 'retry' && done.has(s.rowId))
      .map((s) => s.rowId);
    if (finished.length > 0) this.onFinished(finished);
    return settled;
  }

  release(owner: string, rowIds: readonly string[]): Promise<void> {
    return this.#inner.release(owner, rowIds);
  }
}
