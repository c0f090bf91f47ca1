import type { OutgoingMessage } from '../publishers/publisher.js';

/** How a claimed message ends its attempt. */
export type Settlement =
  | { rowId: string; kind: 'published' }
  /** A shadow message, settled as dispatched without being published. */
  | { rowId: string; kind: 'shadow' }
  | { rowId: string; kind: 'retry'; error: string; delayMs: number }
  | { rowId: string; kind: 'dead'; error: string };

/** Options of one claim. */
export interface ClaimRequest {
  /** Lease owner token, unique per claim: the fencing token for settle/release. */
  owner: string;
  batchSize: number;
  leaseMs: number;
  /** SQL LIKE patterns of unordered topics. */
  unorderedPatterns: readonly string[];
  /** `true`: a dead letter blocks later messages of its aggregate (policy `hold`). */
  deadLettersBlock: boolean;
}

/**
 * Where the dispatcher's messages live. `PgOutboxStore` is the Postgres implementation; tests wrap
 * it to inject failures (e.g. settle failing after a successful publish).
 */
export interface OutboxStore {
  /** Leases up to `batchSize` due messages. */
  claim(request: ClaimRequest): Promise<OutgoingMessage[]>;
  /** Applies settlements where `owner` still holds the lease; returns the row ids it settled. */
  settle(owner: string, settlements: readonly Settlement[]): Promise<string[]>;
  /** Gives back leases on messages whose publish never started. */
  release(owner: string, rowIds: readonly string[]): Promise<void>;
}
