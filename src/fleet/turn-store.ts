import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../publishers/publisher.js';

/**
 * A store whose claims find nothing once its tenant's turn is over: `drain()` then ends the way
 * it ends on an empty outbox — after the batch in flight is published and settled — and the
 * connection goes to a tenant that waited. Nothing is left leased: what was not claimed stays
 * due, for the next turn.
 */
export class TurnStore implements OutboxStore {
  readonly #inner: OutboxStore;
  readonly #turnOver: () => boolean;

  constructor(inner: OutboxStore, turnOver: () => boolean) {
    this.#inner = inner;
    this.#turnOver = turnOver;
  }

  claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    if (this.#turnOver()) return Promise.resolve([]);
    return this.#inner.claim(request);
  }

  settle(
    owner: string,
    settlements: readonly Settlement[],
    request: SettleRequest,
  ): Promise<SettleResult> {
    return this.#inner.settle(owner, settlements, request);
  }

  release(owner: string, rowIds: readonly string[]): Promise<void> {
    return this.#inner.release(owner, rowIds);
  }
}
