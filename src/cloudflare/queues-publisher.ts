import { toEnvelope } from '../publishers/envelope.js';
import {
  errorText,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../publishers/publisher.js';
import type { QueueProducer } from './d1-types.js';

/**
 * Cloudflare Queues limits (https://developers.cloudflare.com/queues/platform/limits/): 100
 * messages and 256 KB per `sendBatch`, 128 KB per message. The defaults stay a little under the
 * KiB values because the platform's own per-message accounting is not documented byte for byte.
 */
export interface QueuesLimits {
  /** Messages per `sendBatch` call. Default 100. */
  maxBatchMessages: number;
  /** Serialised bytes per `sendBatch` call. Default 256 000. */
  maxBatchBytes: number;
  /** Serialised bytes per message; bigger ones are dead-lettered, never sent. Default 128 000. */
  maxMessageBytes: number;
}

/** The default {@link QueuesLimits}. */
export const QUEUES_LIMITS: QueuesLimits = {
  maxBatchMessages: 100,
  maxBatchBytes: 256_000,
  maxMessageBytes: 128_000,
};

const encoder = new TextEncoder();

/**
 * Publishes to a Cloudflare Queue: each message's body is the JSON envelope (the same wire format
 * as every other publisher), sent with `sendBatch` in chunks within the limits, one chunk after
 * another. A chunk whose `sendBatch` rejects is `retryable` for each of its messages. A message
 * over the per-message limit is `permanent` (retrying cannot shrink it).
 *
 * `ordersWithinCall` (issue 16): the dispatcher hands over an aggregate's whole run in one call,
 * in sequence order, so a hot aggregate drains at up to 100 messages per `sendBatch` instead of
 * one. What that promises here: a message of an ordered aggregate is handed to the queue only if
 * every earlier message of its aggregate in the call was accepted — after a failure (a rejected
 * chunk, an oversized message) the aggregate's later messages are not sent and come back
 * `retryable` ("not sent"), and the dispatcher releases them. Other aggregates' messages go on.
 *
 * Queues has no partition key and may deliver in any order, within a batch or across batches;
 * nothing here can change that. The consumer's per-aggregate sequence check restores the order
 * (see `createQueueConsumer`); what the dispatcher guarantees is that message n+1 never reaches
 * the queue before message n did.
 */
export class CloudflareQueuesPublisher implements Publisher {
  readonly ordersWithinCall = true;
  readonly #queue: QueueProducer;
  readonly #limits: QueuesLimits;

  constructor(queue: QueueProducer, limits: Partial<QueuesLimits> = {}) {
    this.#queue = queue;
    this.#limits = { ...QUEUES_LIMITS, ...limits };
  }

  async publish(messages: readonly OutgoingMessage[]): Promise<PublishOutcome[]> {
    const outcomes: PublishOutcome[] = new Array(messages.length);
    /** Ordered aggregates with a message that was not accepted: nothing more of them is sent. */
    const stopped = new Set<string>();
    const stoppedBy = (message: OutgoingMessage): boolean =>
      message.ordered !== false && stopped.has(message.aggregateId);
    const fail = (message: OutgoingMessage, index: number, outcome: PublishOutcome): void => {
      outcomes[index] = outcome;
      if (message.ordered !== false) stopped.add(message.aggregateId);
    };
    const pending = messages.map((message, index) => {
      const envelope = toEnvelope(message);
      return { message, index, envelope, bytes: encoder.encode(JSON.stringify(envelope)).length };
    });

    let next = 0;
    while (next < pending.length) {
      // The next chunk: built only now, so that it skips aggregates a previous chunk stopped.
      const chunk: typeof pending = [];
      let chunkBytes = 0;
      for (; next < pending.length; next++) {
        const entry = pending[next]!;
        if (stoppedBy(entry.message)) {
          outcomes[entry.index] = {
            status: 'retryable',
            error: 'not sent: an earlier message of its aggregate was not accepted',
          };
          continue;
        }
        if (entry.bytes > this.#limits.maxMessageBytes) {
          fail(entry.message, entry.index, {
            status: 'permanent',
            error: `envelope is ${entry.bytes} bytes; Cloudflare Queues accepts at most ${this.#limits.maxMessageBytes} per message`,
          });
          continue;
        }
        if (
          chunk.length === this.#limits.maxBatchMessages ||
          chunkBytes + entry.bytes > this.#limits.maxBatchBytes
        )
          break;
        chunk.push(entry);
        chunkBytes += entry.bytes;
      }
      if (chunk.length === 0) continue;
      // Chunks go one after another: a Worker has a small limit of concurrent subrequests, a
      // failing queue usually fails every chunk alike, and a later chunk may carry the same
      // aggregates' next messages.
      try {
        await this.#queue.sendBatch(
          chunk.map((entry) => ({ body: entry.envelope, contentType: 'json' as const })),
        );
        for (const entry of chunk) outcomes[entry.index] = { status: 'published' };
      } catch (error) {
        const text = `sendBatch failed: ${errorText(error)}`;
        for (const entry of chunk)
          fail(entry.message, entry.index, { status: 'retryable', error: text });
      }
    }
    return outcomes;
  }
}
