import type { OutgoingMessage } from '../publishers/publisher.js';

/** How a claimed message ends its attempt. */
export type Settlement =
  | { rowId: string; kind: 'published' }
  /** A shadow message, settled as dispatched without being published. */
  | { rowId: string; kind: 'shadow' }
  | { rowId: string; kind: 'retry'; error: string; delayMs: number }
  | { rowId: string; kind: 'dead'; error: string }
  /**
   * Never handed to the publisher: the rest of an ordered run after a failure, or what a stopping
   * dispatcher did not start. The lease and the attempt counted by the claim are given back.
   */
  | { rowId: string; kind: 'release' }
  /**
   * Given back without an attempt, to wait `delayMs` (issue 27): its route is paused or it found
   * no rate-limit token, or it failed only because its destination was down (sql/defer.ts).
   */
  | { rowId: string; kind: 'defer'; delayMs: number; reason: string };

/** Options of one claim. */
export interface ClaimRequest {
  /** Lease owner token, unique per claim: the fencing token for settle/release. */
  owner: string;
  batchSize: number;
  leaseMs: number;
  /** `true`: a dead letter blocks later messages of its aggregate (policy `hold`). */
  deadLettersBlock?: boolean;
  /**
   * Take at most this many aggregates' heads first, with the runs behind them, then more heads if
   * the batch has room (the runs-first claim, sql/runs-first-claim.ts). Undefined: heads first.
   * A store may ignore it.
   */
  maxHeads?: number;
}

/** Options of one settle. */
export interface SettleRequest {
  /**
   * `true` (policy `hold`): a dead-lettered ordered message stays at the head of its aggregate and
   * blocks what follows; `false` (`skip`): it leaves the chain and its successor becomes due.
   */
  deadLettersBlock: boolean;
  /** Lease to extend deferred rows by (see {@link SettleResult.deferred}). */
  leaseMs: number;
}

/** What a settle did, by row id. */
export interface SettleResult {
  /** Rows settled as asked. */
  settled: string[];
  /**
   * Rows left untouched for now, still leased to this claim (lease extended): their aggregate's
   * writer was mid-transaction (sql/settle.ts). Settle them again shortly with the same owner.
   */
  deferred: string[];
}

/**
 * Where the dispatcher's messages live. `PgOutboxStore` is the Postgres implementation; tests wrap
 * it to inject failures (e.g. settle failing after a successful publish).
 */
export interface OutboxStore {
  /**
   * Leases up to `batchSize` due messages: ready heads and, behind each ordered head, a run of
   * the consecutive messages of its aggregate.
   */
  claim(request: ClaimRequest): Promise<OutgoingMessage[]>;
  /**
   * Applies settlements where `owner` still holds the lease. Rows in neither list of the result
   * were fenced off (another claim holds them now).
   */
  settle(
    owner: string,
    settlements: readonly Settlement[],
    request: SettleRequest,
  ): Promise<SettleResult>;
  /** Gives back leases on messages whose publish never started. */
  release(owner: string, rowIds: readonly string[]): Promise<void>;
}
