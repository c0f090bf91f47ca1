import { toEnvelope } from '../envelope.js';
import { brokerTraceHeaders } from '../trace-headers.js';
import { mapWithConcurrency } from '../concurrency.js';
import { importPeer } from '../optional-peer.js';
import { published, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from '../publisher.js';
import type { RedisClientLike, RedisModuleLike } from './redis-client.js';
import { XADD_ONCE_SCRIPT, XADD_ONCE_SHA1 } from './xadd-once-script.js';

/** Options of {@link RedisStreamsPublisher}. */
export interface RedisStreamsPublisherOptions {
  /**
   * `redis(s)://[user:pass@]host:6379[/db]` (the publisher connects itself, with `ioredis`) or an
   * existing `ioredis` client (you keep ownership: `close()` leaves it open).
   */
  connection: string | RedisClientLike;
  /** Prefix of the stream keys (`outbox:` + topic) and dedup keys. Default `outbox:`. */
  keyPrefix?: string;
  /**
   * How long a message id is remembered to drop re-publishes. Default 24 h: longer than any
   * default backoff path (10 attempts, 15 min cap), so a re-publish after a crash or expired lease
   * is still recognised.
   */
  dedupTtlMs?: number;
  /** Approximate stream length cap (`XADD … MAXLEN ~ n`). Default: no trimming. */
  maxLen?: number;
  /** Commands in flight per call. Default 64. */
  concurrency?: number;
  /** Loads the `ioredis` module (tests; bundlers). Default: `import('ioredis')`. */
  loadModule?: () => Promise<RedisModuleLike>;
}

/** Default key prefix of {@link RedisStreamsPublisher}. */
export const DEFAULT_REDIS_PREFIX = 'outbox:';
/** Default dedup TTL of {@link RedisStreamsPublisher}: 24 hours. */
export const DEFAULT_REDIS_DEDUP_TTL_MS = 24 * 60 * 60 * 1000;

/**
 * Appends each message to the Redis stream `<prefix><topic>` with fields `id`, `topic`,
 * `aggregateId`, `sequence` and `envelope` (the envelope JSON, which carries payload and headers),
 * plus `traceparent` (and `tracestate`) when the message has a trace context.
 * A Lua script checks and sets `<prefix>dedup:<id>` in the same atomic step as the XADD, so a
 * re-publish within `dedupTtlMs` adds no second entry (and counts as published). Every Redis error
 * (connection refused, timeout, WRONGTYPE, OOM) is `retryable`.
 */
export class RedisStreamsPublisher implements Publisher {
  readonly #options: RedisStreamsPublisherOptions;
  readonly #prefix: string;
  #client: Promise<RedisClientLike> | undefined;

  constructor(options: RedisStreamsPublisherOptions) {
    this.#options = options;
    this.#prefix = options.keyPrefix ?? DEFAULT_REDIS_PREFIX;
    if (typeof options.connection !== 'string') this.#client = Promise.resolve(options.connection);
  }

  /** The stream key a topic goes to. */
  streamKey(topic: string): string {
    return this.#prefix + topic;
  }

  /** `redis`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'redis';
  }

  async publish(
    messages: readonly OutgoingMessage[],
    options: PublishOptions = {},
  ): Promise<PublishOutcome[]> {
    let client: RedisClientLike;
    try {
      client = await this.#connect();
    } catch (error) {
      return messages.map(() => retryable(`Redis: ${errorMessage(error)}`));
    }
    return mapWithConcurrency(messages, this.#options.concurrency ?? 64, async (message) => {
      if (options.signal?.aborted) return retryable('publish aborted');
      const stream = options.destination ?? this.streamKey(message.topic);
      try {
        await this.#xaddOnce(client, stream, message);
        return published();
      } catch (error) {
        return retryable(`Redis: XADD ${stream}: ${errorMessage(error)}`);
      }
    });
  }

  async #xaddOnce(
    client: RedisClientLike,
    stream: string,
    message: OutgoingMessage,
  ): Promise<unknown> {
    const args = [
      stream,
      `${this.#prefix}dedup:${message.id}`,
      this.#options.dedupTtlMs ?? DEFAULT_REDIS_DEDUP_TTL_MS,
      this.#options.maxLen ?? 0,
      'id',
      message.id,
      'topic',
      message.topic,
      'aggregateId',
      message.aggregateId,
      'sequence',
      message.sequence,
      'envelope',
      JSON.stringify(toEnvelope(message)),
      ...Object.entries(brokerTraceHeaders(message)).flat(),
    ];
    try {
      return await client.evalsha(XADD_ONCE_SHA1, 2, ...args);
    } catch (error) {
      // The script cache is empty after a restart or SCRIPT FLUSH: send the script once.
      if (!errorMessage(error).startsWith('NOSCRIPT')) throw error;
      return client.eval(XADD_ONCE_SCRIPT, 2, ...args);
    }
  }

  /** Disconnects if the publisher created the client. */
  async close(): Promise<void> {
    if (typeof this.#options.connection !== 'string') return;
    const client = this.#client;
    this.#client = undefined;
    const opened = await client?.catch(() => undefined);
    await opened?.quit().catch(() => undefined);
  }

  #connect(): Promise<RedisClientLike> {
    this.#client ??= this.#create();
    return this.#client;
  }

  async #create(): Promise<RedisClientLike> {
    const url = this.#options.connection as string;
    const load =
      this.#options.loadModule ??
      (() =>
        importPeer(
          'ioredis',
          'RedisStreamsPublisher',
          () => import('ioredis'),
        ) as Promise<RedisModuleLike>);
    const { Redis } = await load();
    const client = new Redis(url, {
      // ioredis reconnects by itself; a command fails after one retry instead of waiting in the
      // offline queue for a server that is down, so the dispatcher gets `retryable` quickly.
      lazyConnect: false,
      maxRetriesPerRequest: 1,
      connectTimeout: 10_000,
      connectionName: 'agent-outbox',
    });
    // ioredis logs unhandled 'error' events; failures reach us through the commands instead.
    client.on('error', () => undefined);
    return client;
  }
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
