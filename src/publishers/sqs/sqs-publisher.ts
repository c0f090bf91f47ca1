import { toEnvelope } from '../envelope.js';
import { importPeer } from '../optional-peer.js';
import { permanent, published, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from '../publisher.js';
import type {
  SqsBatchEntry,
  SqsClientLike,
  SqsModuleLike,
  SqsSendMessageBatchOutput,
} from './sqs-client.js';

/** Options of {@link SqsPublisher}. */
export interface SqsPublisherOptions {
  /** Queue URL. A name ending in `.fifo` makes it a FIFO queue (see `fifo`). */
  queueUrl: string;
  /**
   * An existing `SQSClient` (you keep ownership), or the config the publisher creates one with
   * (`region`, `endpoint`, `credentials`, …; passed to `new SQSClient(config)` unchanged).
   */
  client?: SqsClientLike | Record<string, unknown>;
  /**
   * FIFO queue: sets MessageGroupId = aggregate id (order per aggregate) and
   * MessageDeduplicationId = message id (SQS drops re-publishes within 5 minutes). Default: true
   * when the queue URL ends in `.fifo`.
   */
  fifo?: boolean;
  /**
   * Most bytes of message bodies in one `SendMessageBatch` request. Default 262 144 (256 KiB, the
   * limit of queues that were not raised to 1 MiB). A chunk holds at most 10 entries either way.
   */
  maxBatchBytes?: number;
  /** Loads the SDK (tests; bundlers). Default: `import('@aws-sdk/client-sqs')`. */
  loadModule?: () => Promise<SqsModuleLike>;
}

/** Entries per `SendMessageBatch`: the SQS limit. */
export const SQS_BATCH_LIMIT = 10;

/** Whole-request error names that retrying the same request cannot fix. */
const PERMANENT_REQUEST_ERRORS = new Set(['InvalidMessageContents', 'UnsupportedOperation']);

/**
 * Publishes to Amazon SQS with `SendMessageBatch`, in chunks of at most 10 entries (and
 * `maxBatchBytes`), sent concurrently. The body is the envelope JSON. Per-entry failures become
 * per-message outcomes: `SenderFault: true` → `permanent` (SQS refuses this entry as given),
 * otherwise `retryable`. A failed request (network, throttling, credentials, missing queue) is
 * `retryable` for its chunk: a configuration error must not dead-letter every message.
 *
 * Tested against a local HTTP endpoint that speaks the SQS JSON protocol, not against AWS.
 */
export class SqsPublisher implements Publisher {
  readonly #options: SqsPublisherOptions;
  readonly #fifo: boolean;
  #session: Promise<{ client: SqsClientLike; sdk: SqsModuleLike }> | undefined;

  constructor(options: SqsPublisherOptions) {
    this.#options = options;
    this.#fifo = options.fifo ?? /\.fifo\/?$/.test(options.queueUrl);
  }

  /** `aws_sqs`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'aws_sqs';
  }

  async publish(
    messages: readonly OutgoingMessage[],
    options: PublishOptions = {},
  ): Promise<PublishOutcome[]> {
    let session: { client: SqsClientLike; sdk: SqsModuleLike };
    try {
      session = await this.#connect();
    } catch (error) {
      return messages.map(() => retryable(`SQS: ${errorText(error)}`));
    }
    const queueUrl = options.destination ?? this.#options.queueUrl;
    const outcomes = new Array<PublishOutcome>(messages.length);
    const chunks = chunkEntries(
      messages.map((message, index) => this.#entry(message, index)),
      this.#options.maxBatchBytes ?? 262_144,
    );
    await Promise.all(
      chunks.map(async (entries) => {
        const results = await this.#sendChunk(session, queueUrl, entries, options.signal);
        entries.forEach((entry, i) => (outcomes[Number(entry.Id.slice(1))] = results[i]!));
      }),
    );
    return outcomes;
  }

  /** Entry ids are `m<index>`: unique within a request and mapped back to the input order. */
  #entry(message: OutgoingMessage, index: number): SqsBatchEntry {
    const entry: SqsBatchEntry = {
      Id: `m${index}`,
      MessageBody: JSON.stringify(toEnvelope(message)),
    };
    if (this.#fifo) {
      entry.MessageGroupId = message.aggregateId;
      entry.MessageDeduplicationId = dedupId(message.id);
    }
    return entry;
  }

  async #sendChunk(
    session: { client: SqsClientLike; sdk: SqsModuleLike },
    queueUrl: string,
    entries: SqsBatchEntry[],
    signal?: AbortSignal,
  ): Promise<PublishOutcome[]> {
    if (signal?.aborted) return entries.map(() => retryable('publish aborted'));
    let output: SqsSendMessageBatchOutput;
    try {
      const command = new session.sdk.SendMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: entries,
      });
      output = await session.client.send(command);
    } catch (error) {
      const name = (error as { name?: unknown } | null)?.name;
      const text = `SQS: ${errorText(error)}`;
      const fatal = typeof name === 'string' && PERMANENT_REQUEST_ERRORS.has(name);
      return entries.map(() => (fatal ? permanent(text) : retryable(text)));
    }
    const succeeded = new Set((output.Successful ?? []).map((entry) => entry.Id));
    const failed = new Map((output.Failed ?? []).map((entry) => [entry.Id, entry]));
    return entries.map((entry) => {
      if (succeeded.has(entry.Id)) return published();
      const failure = failed.get(entry.Id);
      if (!failure) return retryable('SQS: entry missing from the SendMessageBatch response');
      const text = `SQS: ${failure.Code ?? 'error'}: ${failure.Message ?? ''}`.trimEnd();
      return failure.SenderFault ? permanent(text) : retryable(text);
    });
  }

  /** Destroys the client if the publisher created it. */
  async close(): Promise<void> {
    const session = this.#session;
    this.#session = undefined;
    const opened = await session?.catch(() => undefined);
    if (opened && !isClient(this.#options.client)) opened.client.destroy();
  }

  #connect(): Promise<{ client: SqsClientLike; sdk: SqsModuleLike }> {
    if (!this.#session) {
      const session = this.#open();
      this.#session = session;
      session.catch(() => {
        if (this.#session === session) this.#session = undefined;
      });
    }
    return this.#session;
  }

  async #open(): Promise<{ client: SqsClientLike; sdk: SqsModuleLike }> {
    const load =
      this.#options.loadModule ??
      (() =>
        importPeer(
          '@aws-sdk/client-sqs',
          'SqsPublisher',
          () => import('@aws-sdk/client-sqs'),
        ) as unknown as Promise<SqsModuleLike>);
    const sdk = await load();
    const given = this.#options.client;
    const client = isClient(given) ? given : new sdk.SQSClient(given ?? {});
    return { client, sdk };
  }
}

function isClient(value: SqsPublisherOptions['client']): value is SqsClientLike {
  return typeof (value as SqsClientLike | undefined)?.send === 'function';
}

/** MessageDeduplicationId allows 128 characters of `[!-~]`; a UUID always fits. */
function dedupId(id: string): string {
  return id.replace(/[^!-~]/g, '_').slice(0, 128);
}

/** Splits entries into requests of at most 10 entries and `maxBytes` of bodies. */
export function chunkEntries(entries: SqsBatchEntry[], maxBytes: number): SqsBatchEntry[][] {
  const chunks: SqsBatchEntry[][] = [];
  let current: SqsBatchEntry[] = [];
  let bytes = 0;
  for (const entry of entries) {
    const size = Buffer.byteLength(entry.MessageBody);
    if (current.length === SQS_BATCH_LIMIT || (current.length > 0 && bytes + size > maxBytes)) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(entry);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

function errorText(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return error.name && error.name !== 'Error' && !error.message.startsWith(error.name)
    ? `${error.name}: ${error.message}`
    : error.message;
}
