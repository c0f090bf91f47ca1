import { toEnvelope } from '../envelope.js';
import { mapWithConcurrency } from '../concurrency.js';
import { importPeer } from '../optional-peer.js';
import { allRetryable, permanent, published, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from '../publisher.js';
import type { NatsConnectionLike, NatsJetStreamLike, NatsModuleLike } from './nats-client.js';
import { JetStreamStream } from './jetstream-stream.js';

/** Options of {@link NatsJetStreamPublisher}. */
export interface NatsJetStreamPublisherOptions {
  /**
   * `nats://[user:pass@|token@]host:port` (the publisher connects itself, with the `nats`
   * package) or an existing `NatsConnection` (you keep ownership: `close()` leaves it open).
   */
  connection: string | NatsConnectionLike;
  /** Prepended to the topic to form the subject (`outbox.` + `mail.send`). Default `''`. */
  subjectPrefix?: string;
  /**
   * Create this stream when it does not exist. Without this option a stream capturing the
   * subjects must already exist, or publishes come back `retryable`.
   */
  stream?: {
    /** Default `OUTBOX`. */
    name?: string;
    /**
     * Subjects to create the stream with (an existing stream is then left alone). Default
     * `[subjectPrefix + '>']`; with no prefix either, the stream grows with the topics published
     * (`mail.send` adds `mail.>`) instead of capturing the whole server with `>` — see
     * `JetStreamStream`.
     */
    subjects?: string[];
  };
  /** How long to wait for each PubAck. Default 5000 ms. */
  ackTimeoutMs?: number;
  /** PubAcks awaited at once per call. Default 64. */
  concurrency?: number;
  /** Loads the `nats` module (tests; bundlers). Default: `import('nats')`. */
  loadModule?: () => Promise<NatsModuleLike>;
}

/** Default stream name when {@link NatsJetStreamPublisherOptions.stream} is set. */
export const DEFAULT_NATS_STREAM = 'OUTBOX';

interface Session {
  connection: NatsConnectionLike;
  jetstream: NatsJetStreamLike;
  /** Present when the publisher manages the stream (`stream` option). */
  stream: JetStreamStream | undefined;
}

/**
 * Publishes to NATS JetStream and waits for each PubAck, so `published` means "stored by the
 * stream". The message id goes out as `Nats-Msg-Id`: within the stream's duplicate window
 * (default 2 min) a re-publish is dropped by the server and acknowledged with `duplicate: true`,
 * which counts as published — the first copy is stored. The body is the envelope JSON (message
 * headers travel inside it; no NATS headers besides `Nats-Msg-Id` are set).
 *
 * Outcomes: an unreachable server, a missing stream (no responders) or a PubAck timeout is
 * `retryable`; a payload above the server's `max_payload` or the stream's `max_msg_size` is
 * `permanent`.
 */
export class NatsJetStreamPublisher implements Publisher {
  readonly #options: NatsJetStreamPublisherOptions;
  readonly #ownsConnection: boolean;
  #session: Promise<Session> | undefined;

  constructor(options: NatsJetStreamPublisherOptions) {
    this.#options = options;
    this.#ownsConnection = typeof options.connection === 'string';
  }

  async publish(
    messages: readonly OutgoingMessage[],
    options: PublishOptions = {},
  ): Promise<PublishOutcome[]> {
    if (messages.length === 0) return [];
    let session: Session;
    try {
      session = await this.#connect();
    } catch (error) {
      return allRetryable(messages.length, `NATS: ${describe(error)}`);
    }
    const prefix = this.#options.subjectPrefix ?? '';
    if (session.stream) {
      const subjects = messages.map((m) => options.destination ?? prefix + m.topic);
      try {
        await session.stream.ensure(subjects);
      } catch (error) {
        return allRetryable(
          messages.length,
          `NATS: stream ${this.#streamName}: ${describe(error)}`,
        );
      }
    }
    return mapWithConcurrency(messages, this.#options.concurrency ?? 64, async (message) => {
      if (options.signal?.aborted) return retryable('publish aborted');
      const subject = options.destination ?? prefix + message.topic;
      try {
        // A duplicate PubAck means the stream already holds this id: the effect is durable.
        await session.jetstream.publish(subject, encode(message), {
          msgID: message.id,
          timeout: this.#options.ackTimeoutMs ?? 5000,
        });
        return published();
      } catch (error) {
        if (isNoResponders(error)) session.stream?.forget(subject);
        return classify(error, subject);
      }
    });
  }

  /** Closes the connection if the publisher opened it. */
  async close(): Promise<void> {
    const session = this.#session;
    this.#session = undefined;
    if (!session || !this.#ownsConnection) return;
    const { connection } = await session.catch(() => ({ connection: undefined }));
    if (connection && !connection.isClosed()) await connection.close();
  }

  /** One session, re-created after a failed connect or a closed connection. */
  #connect(): Promise<Session> {
    const current = this.#session;
    if (current) {
      return current.then((session) => {
        if (!session.connection.isClosed()) return session;
        if (this.#session === current) this.#session = undefined;
        return this.#connect();
      });
    }
    const session = this.#open();
    this.#session = session;
    session.catch(() => {
      if (this.#session === session) this.#session = undefined;
    });
    return session;
  }

  async #open(): Promise<Session> {
    let connection: NatsConnectionLike;
    if (typeof this.#options.connection === 'string') {
      const load =
        this.#options.loadModule ??
        (() => importPeer('nats', 'NatsJetStreamPublisher', () => import('nats')));
      const nats = (await load()) as NatsModuleLike;
      connection = await nats.connect(connectOptions(this.#options.connection));
    } else {
      connection = this.#options.connection;
    }
    let stream: JetStreamStream | undefined;
    if (this.#options.stream) {
      try {
        const prefix = this.#options.subjectPrefix ?? '';
        const subjects = this.#options.stream.subjects ?? (prefix ? [`${prefix}>`] : undefined);
        stream = new JetStreamStream(
          await connection.jetstreamManager(),
          this.#streamName,
          subjects,
        );
      } catch (error) {
        if (this.#ownsConnection) await connection.close().catch(() => undefined);
        throw error;
      }
    }
    return { connection, jetstream: connection.jetstream(), stream };
  }

  get #streamName(): string {
    return this.#options.stream?.name ?? DEFAULT_NATS_STREAM;
  }
}

function encode(message: OutgoingMessage): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(toEnvelope(message)));
}

/** `nats://user:pass@host:4222` → connect options; nats.js wants credentials apart. */
export function connectOptions(url: string): Parameters<NatsModuleLike['connect']>[0] {
  const parsed = new URL(url);
  const options: Parameters<NatsModuleLike['connect']>[0] = {
    servers: `${parsed.hostname}:${parsed.port || '4222'}`,
    name: 'agent-outbox',
  };
  if (parsed.protocol === 'tls:' || parsed.protocol === 'wss:') options.servers = url;
  if (parsed.username && parsed.password) {
    options.user = decodeURIComponent(parsed.username);
    options.pass = decodeURIComponent(parsed.password);
  } else if (parsed.username) {
    options.token = decodeURIComponent(parsed.username);
  }
  return options;
}

function isNoResponders(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '503';
}

function describe(error: unknown): string {
  const e = error as { code?: unknown; message?: unknown } | null;
  const message = typeof e?.message === 'string' ? e.message : String(error);
  return typeof e?.code === 'string' && e.code !== message ? `${e.code} ${message}` : message;
}

/** JetStream errors → outcome. Size limits are permanent; everything else may pass later. */
function classify(error: unknown, subject: string): PublishOutcome {
  const e = error as { code?: unknown; api_error?: { err_code?: number } } | null;
  if (e?.code === 'MAX_PAYLOAD_EXCEEDED' || e?.api_error?.err_code === 10054) {
    return permanent(`NATS: message too large for ${subject}: ${describe(error)}`);
  }
  if (isNoResponders(error)) {
    return retryable(`NATS: no JetStream stream captures subject ${subject} (no responders)`);
  }
  return retryable(`NATS: ${describe(error)}`);
}
