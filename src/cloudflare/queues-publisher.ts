import { toEnvelope } from '../publishers/envelope.js';
import {
  errorText,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../publishers/publisher.js';
import type { QueueProducer, QueueSendRequest } from './d1-types.js';

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
 * as every other publisher), sent with `sendBatch` in chunks within the limits. A chunk whose
 * `sendBatch` rejects is `retryable` for each of its messages; other chunks are unaffected. A
 * message over the per-message limit is `permanent` (retrying cannot shrink it).
 *
 * Queues has no partition key, so nothing here orders messages; the consumer's per-aggregate
 * sequence check does (see `createQueueConsumer`).
 */
export class CloudflareQueuesPublisher implements Publisher {
  readonly #queue: QueueProducer;
  readonly #limits: QueuesLimits;

  constructor(queue: QueueProducer, limits: Partial<QueuesLimits> = {}) {
    this.#queue = queue;
    this.#limits = { ...QUEUES_LIMITS, ...limits };
  }

  async publish(messages: readonly OutgoingMessage[]): Promise<PublishOutcome[]> {
    const outcomes: PublishOutcome[] = new Array(messages.length);
    const chunks: { index: number; request: QueueSendRequest }[][] = [];
    let chunk: { index: number; request: QueueSendRequest }[] = [];
    let chunkBytes = 0;
    messages.forEach((message, index) => {
      const envelope = toEnvelope(message);
      const bytes = encoder.encode(JSON.stringify(envelope)).length;
      if (bytes > this.#limits.maxMessageBytes) {
        outcomes[index] = {
          status: 'permanent',
          error: `envelope is ${bytes} bytes; Cloudflare Queues accepts at most ${this.#limits.maxMessageBytes} per message`,
        };
        return;
      }
      if (
        chunk.length === this.#limits.maxBatchMessages ||
        chunkBytes + bytes > this.#limits.maxBatchBytes
      ) {
        chunks.push(chunk);
        chunk = [];
        chunkBytes = 0;
      }
      chunk.push({ index, request: { body: envelope, contentType: 'json' } });
      chunkBytes += bytes;
    });
    if (chunk.length > 0) chunks.push(chunk);

    // Chunks go one after another: a Worker has a small limit of concurrent subrequests, and a
    // failing queue usually fails every chunk alike.
    for (const part of chunks) {
      try {
        await this.#queue.sendBatch(part.map((entry) => entry.request));
        for (const entry of part) outcomes[entry.index] = { status: 'published' };
      } catch (error) {
        const text = `sendBatch failed: ${errorText(error)}`;
        for (const entry of part) outcomes[entry.index] = { status: 'retryable', error: text };
      }
    }
    return outcomes;
  }
}
