import type { OutgoingMessage, PublishOutcome, Publisher } from '../publisher.js';

/** Decides an injected outcome for a message; return undefined to publish normally. */
export type FailureInjector = (message: OutgoingMessage) => PublishOutcome | undefined;

/**
 * Keeps published messages in memory, in publish order. For the demo, examples and unit tests of
 * code around a publisher — not a stand-in for a broker in a test that claims broker behaviour.
 */
export class InMemoryPublisher implements Publisher {
  /** Every accepted message, in the order accepted (re-publishes included). */
  readonly published: OutgoingMessage[] = [];
  #inject: FailureInjector | undefined;
  #listeners = new Set<(message: OutgoingMessage) => void>();

  constructor(options: { inject?: FailureInjector } = {}) {
    this.#inject = options.inject;
  }

  /** Replaces the failure injector (undefined: publish everything). */
  setFailureInjector(inject: FailureInjector | undefined): void {
    this.#inject = inject;
  }

  /** Calls `listener` for each accepted message; returns an unsubscribe function. */
  subscribe(listener: (message: OutgoingMessage) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** `memory`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'memory';
  }

  async publish(messages: readonly OutgoingMessage[]): Promise<PublishOutcome[]> {
    return messages.map((message) => {
      const injected = this.#inject?.(message);
      if (injected && injected.status !== 'published') return injected;
      const copy = structuredClone(message);
      this.published.push(copy);
      for (const listener of this.#listeners) listener(copy);
      return { status: 'published' };
    });
  }

  async close(): Promise<void> {
    this.#listeners.clear();
  }
}
