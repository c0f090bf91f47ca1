/**
 * The structural subset of the Cloudflare Workers runtime APIs this module calls: D1, a Queue
 * producer, and a Queue consumer's batch. Typed here rather than imported from
 * `@cloudflare/workers-types`, whose globals clash with Node's in a shared tsconfig; the real
 * `env.DB`, `env.QUEUE` and `MessageBatch` satisfy these interfaces.
 */

/** One D1 statement, bound or not (`D1PreparedStatement`). */
export interface D1Statement {
  bind(...values: unknown[]): D1Statement;
  all<T = Record<string, unknown>>(): Promise<D1Result<T>>;
  first<T = Record<string, unknown>>(): Promise<T | null>;
  run(): Promise<D1Result<unknown>>;
}

/** What D1 returns for a statement (`D1Result`). */
export interface D1Result<T> {
  results: T[];
  success: boolean;
  meta?: { changes?: number; [key: string]: unknown };
}

/** A D1 database binding (`env.DB`). `batch` runs its statements in ONE transaction. */
export interface D1Db {
  prepare(sql: string): D1Statement;
  batch<T = unknown>(statements: D1Statement[]): Promise<D1Result<T>[]>;
}

/** One message of `Queue.sendBatch` (`MessageSendRequest`). */
export interface QueueSendRequest {
  body: unknown;
  contentType?: 'text' | 'bytes' | 'json' | 'v8';
  delaySeconds?: number;
}

/**
 * A Queue producer binding (`env.QUEUE`). Note what is NOT here: Cloudflare Queues has no
 * partition or ordering key (`QueueSendOptions` is only `contentType` and `delaySeconds`), so
 * per-aggregate order is restored by the consumer's sequence check.
 */
export interface QueueProducer {
  sendBatch(messages: Iterable<QueueSendRequest>): Promise<unknown>;
}

/** One delivered message of a Queue consumer batch (`Message`). */
export interface QueueDelivery {
  readonly id: string;
  readonly timestamp: Date;
  readonly body: unknown;
  /** Delivery attempt, 1 for the first. */
  readonly attempts: number;
  ack(): void;
  retry(options?: { delaySeconds?: number }): void;
}

/** A Queue consumer batch (`MessageBatch`). */
export interface QueueBatch {
  readonly queue: string;
  readonly messages: readonly QueueDelivery[];
}
