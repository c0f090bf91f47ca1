import { toEnvelope } from '../envelope.js';
import { mapWithConcurrency } from '../concurrency.js';
import { importPeer } from '../optional-peer.js';
import { allRetryable, permanent, published, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from '../publisher.js';
import { brokerTraceHeaders } from '../trace-headers.js';
import type {
  NatsConnectionLike,
  NatsHeadersLike,
  NatsJetStreamLike,
  NatsModuleLike,
} from './nats-client.js';
import { connectOptions } from './connect-options.js';
import { JetStreamStream, type NatsStreamReport } from './jetstream-stream.js';

export { connectOptions, NatsUrlError } from './connect-options.js';

/** Options of {@link NatsJetStreamPublisher}. */
export interface NatsJetStreamPublisherOptions {
  /**
   * `nats://[user:pass@|token@]host:port` (the publisher connects itself, with the `nats`
   * package), a cluster as a comma-separated list of such URLs (`nats://h:4301,nats://h:4302`:
   * a start works while any one of them answers, and a lost node fails over to the others), or
   * an existing `NatsConnection` (you keep ownership: `close()` leaves it open).
   */
  connection: string | NatsConnectionLike;
  /** Prepended to the topic to form the subject (`outbox.` + `mail.send`). Default `''`. */
  subjectPrefix?: string;
  /**
   * The JetStream stream to publish into (CLI `--nats-stream`). If it exists — typically one the
   * operator created — it is used as it is and never changed: each subject is checked against
   * its subjects (NATS wildcards: `*` one token, `>` one or more trailing tokens), and a subject
   * it does not capture comes back `permanent` with a `last_error` naming the subject, the stream
   * and what to do. If it is missing, it is created (see `subjects`).
   *
   * Without this option nothing is checked or created: a stream capturing the subjects must
   * exist, or publishes come back `retryable` ("no JetStream stream captures subject …").
   */
  stream?: {
    /** The stream's name. Default `OUTBOX` ({@link DEFAULT_NATS_STREAM}). */
    name?: string;
    /**
     * Subjects to create a missing stream with (CLI `--nats-subjects`); ignored when the stream
     * exists. Default `[subjectPrefix + '>']`; with no prefix either, the stream is created with
     * one subject per topic's first segment and grows as topics arrive (`mail.send` adds
     * `mail.>`, `audit` adds `audit`) instead of capturing the whole server with `>`. Only a
     * stream the dispatcher created (marked in its description) ever grows.
     *
     * @example ['orders.created', 'orders.cancelled']
     */
    subjects?: string[];
    /**
     * Called the first time a subject is found outside the stream (its messages come back
     * `permanent`). `outbox dispatch` logs it as a warning.
     */
    onUncoveredSubject?: (event: NatsUncoveredSubject) => void;
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

/** A subject the publisher's stream does not capture (see `stream.onUncoveredSubject`). */
export interface NatsUncoveredSubject {
  /** The stream's name. */
  stream: string;
  /** The subject no message can be published to. */
  subject: string;
  /** The stream's subjects. */
  streamSubjects: readonly string[];
  /** The `last_error` its messages get. */
  error: string;
}

export type { NatsStreamReport } from './jetstream-stream.js';

interface Session {
  connection: NatsConnectionLike;
  jetstream: NatsJetStreamLike;
  /** Present when the publisher manages the stream (`stream` option). */
  stream: JetStreamStream | undefined;
  /** The `nats` module's `headers()`, when the module could be loaded. */
  headers: (() => NatsHeadersLike) | undefined;
  /** When the connection last lost its server (see `recovering`). */
  lostAt: number | undefined;
  /** Called with the lost server when the connection drops (see `watch`). */
  onDisconnect: Set<(server: string) => void>;
  /** Ends `watch` on a connection the publisher leaves open at `close()`. */
  stopWatching: () => void;
}

/**
 * The `retryAfterMs` of a publish whose server went away before its PubAck: long enough for the
 * client to reach another server of the list (it tries the next one at once), and, being a
 * `Retry-After`, it pauses the route without charging an attempt (G9) however few messages were
 * in flight.
 */
const RECONNECT_RETRY_AFTER_MS = 1_000;

/** How long one copy of a message waits for its PubAck while the session recovers (`#send`). */
const RECOVERY_SLICE_MS = 1_000;

/**
 * How long after losing a server the session counts as recovering: JetStream re-elects a lost
 * stream leader within about 10 s, and a publish sent while the client was reconnecting can lose
 * its PubAck (its reply subscription not yet back) even though other publishes already succeed.
 */
const RECOVERY_WINDOW_MS = 30_000;

/** Within {@link RECOVERY_WINDOW_MS} of the last lost server. */
function recovering(session: Session): boolean {
  return session.lostAt !== undefined && Date.now() - session.lostAt < RECOVERY_WINDOW_MS;
}

/**
 * Publishes to NATS JetStream and waits for each PubAck, so `published` means "stored by the
 * stream". The message id goes out as `Nats-Msg-Id`: within the stream's duplicate window
 * (default 2 min) a re-publish is dropped by the server and acknowledged with `duplicate: true`,
 * which counts as published — the first copy is stored. The body is the envelope JSON (message
 * headers travel inside it); the NATS headers are `Nats-Msg-Id` and the W3C trace context
 * (`traceparent`, `tracestate`), for consumers that continue the trace from NATS headers.
 *
 * Outcomes: an unreachable server, a missing stream (no responders) or a PubAck timeout is
 * `retryable`; a payload above the server's `max_payload` or the stream's `max_msg_size`, or a
 * subject outside the configured `stream`, is `permanent`.
 */
export class NatsJetStreamPublisher implements Publisher {
  readonly #options: NatsJetStreamPublisherOptions;
  readonly #ownsConnection: boolean;
  #session: Promise<Session> | undefined;
  /** Subjects already reported to `onUncoveredSubject`: once each, not once per message. */
  readonly #reported = new Set<string>();

  /** @throws NatsUrlError when `connection` is a URL (list) that cannot be read. */
  constructor(options: NatsJetStreamPublisherOptions) {
    this.#options = options;
    this.#ownsConnection = typeof options.connection === 'string';
    // A mistyped URL is the caller's to fix now, not a retryable outcome on every publish.
    if (typeof options.connection === 'string') connectOptions(options.connection);
  }

  /** `nats`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'nats';
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
    let uncovered = new Set<string>();
    if (session.stream) {
      const subjects = messages.map((m) => options.destination ?? prefix + m.topic);
      try {
        uncovered = new Set(await session.stream.uncovered(subjects));
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
      if (session.stream && uncovered.has(subject)) {
        return this.#uncovered(session.stream, subject, message.topic);
      }
      let lost: ((server: string) => void) | undefined;
      try {
        const disconnected = new Promise<string>((resolve) => {
          lost = resolve;
          session.onDisconnect.add(resolve);
        });
        // A duplicate PubAck means the stream already holds this id: the effect is durable.
        const abandon = { now: false };
        const publishing = this.#send(session, subject, message, abandon);
        const server = await Promise.race([publishing.then(() => undefined), disconnected]);
        if (server === undefined) return published();
        // Abandoned: no copy sent after this, and its timeout is nobody's to hear.
        abandon.now = true;
        publishing.catch(() => undefined);
        return retryable(
          `NATS: connection to ${server} lost before the PubAck; the client reconnects to another server of the list, and the next attempt (same Nats-Msg-Id) is dropped by the stream's duplicate window if this one was stored`,
          RECONNECT_RETRY_AFTER_MS,
        );
      } catch (error) {
        if (isNoResponders(error)) session.stream?.forget(subject);
        const outcome = classify(error, subject);
        // Still no PubAck since a server was lost: the cluster is still electing the stream's
        // leader, an outage rather than this message's failure, so the route pauses uncharged.
        if (
          recovering(session) &&
          outcome.status === 'retryable' &&
          (isTimeout(error) || isNoResponders(error))
        )
          return retryable(
            `${outcome.error} (since a server of the cluster was lost; JetStream may still be electing the stream's leader)`,
            RECONNECT_RETRY_AFTER_MS,
          );
        return outcome;
      } finally {
        if (lost) session.onDisconnect.delete(lost);
      }
    });
  }

  /**
   * Sends one message and waits for its PubAck, `ackTimeoutMs` in all. While the session recovers
   * from a lost server (`RECOVERY_WINDOW_MS` after a disconnect) the wait is cut in slices of
   * {@link RECOVERY_SLICE_MS}, the message sent again after each (same `Nats-Msg-Id`, so the
   * stream stores it once): a stream whose leader died stores nothing until its new leader is
   * elected, and a copy sent in the last slice goes through about when that happens instead of
   * one whole `ackTimeoutMs` later.
   */
  async #send(
    session: Session,
    subject: string,
    message: OutgoingMessage,
    abandon: { now: boolean },
  ): Promise<void> {
    const deadline = Date.now() + (this.#options.ackTimeoutMs ?? 5000);
    let last: unknown;
    for (;;) {
      const left = deadline - Date.now();
      // Out of time after a slice (a copy's wait may have used it up): the last failure stands.
      if (last !== undefined && left < 50) throw last;
      const started = Date.now();
      try {
        await session.jetstream.publish(subject, encode(message), {
          msgID: message.id,
          timeout: Math.max(1, recovering(session) ? Math.min(RECOVERY_SLICE_MS, left) : left),
          ...traceHeaders(session, message),
        });
        return;
      } catch (error) {
        last = error;
        const again = isTimeout(error) || isNoResponders(error);
        if (abandon.now || !recovering(session) || !again) throw error;
        // No responders comes back at once: space the copies as a timeout would.
        const rest = RECOVERY_SLICE_MS - (Date.now() - started);
        if (rest > 0) await new Promise((resolve) => setTimeout(resolve, Math.min(rest, left)));
      }
    }
  }

  /**
   * Connects and reads the `stream` without creating or changing it — what `outbox dispatch`
   * logs at startup. Undefined without the `stream` option. Rejects when the server cannot be
   * reached or JetStream is not enabled.
   */
  async inspectStream(): Promise<NatsStreamReport | undefined> {
    const { stream } = await this.#connect();
    return stream?.inspect();
  }

  /** Closes the connection if the publisher opened it. */
  async close(): Promise<void> {
    const session = this.#session;
    this.#session = undefined;
    if (!session) return;
    const opened = await session.catch(() => undefined);
    opened?.stopWatching();
    if (opened && this.#ownsConnection && !opened.connection.isClosed())
      await opened.connection.close();
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
    let nats: NatsModuleLike | undefined;
    const load =
      this.#options.loadModule ??
      (() => importPeer('nats', 'NatsJetStreamPublisher', () => import('nats')));
    if (typeof this.#options.connection === 'string') {
      nats = (await load()) as NatsModuleLike;
      connection = await nats.connect(connectOptions(this.#options.connection));
    } else {
      connection = this.#options.connection;
      // Only for headers(): a connection from another client (@nats-io/transport-node) still
      // publishes, with the trace context in the envelope only.
      nats = (await load().catch(() => undefined)) as NatsModuleLike | undefined;
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
    const session: Session = {
      connection,
      jetstream: connection.jetstream(),
      stream,
      headers: nats?.headers?.bind(nats),
      lostAt: undefined,
      onDisconnect: new Set(),
      stopWatching: () => undefined,
    };
    watch(session);
    return session;
  }

  get #streamName(): string {
    return this.#options.stream?.name ?? DEFAULT_NATS_STREAM;
  }

  /**
   * A subject outside the stream. `permanent`, not `retryable`: the stream's subjects were just
   * read, and nothing the dispatcher does will change them (it never changes a stream it did not
   * create), so retrying would only hold the message — and, for an ordered topic, its aggregate —
   * for the hour or so `maxAttempts` takes, then dead-letter it anyway. Dead-lettered at once it
   * shows up in `outbox status` and the log, and `outbox replay` publishes it, same id, once
   * the operator has added the subject.
   */
  #uncovered(stream: JetStreamStream, subject: string, topic: string): PublishOutcome {
    const shown =
      stream.subjects.slice(0, 20).join(', ') + (stream.subjects.length > 20 ? ', …' : '');
    const error =
      `NATS: stream ${stream.name} does not capture subject ${subject} (its subjects: ` +
      `${shown || 'none'}); the dispatcher does not change this stream's subjects. Add the ` +
      `subject to the stream, or publish topic ${topic} elsewhere, then: outbox replay ` +
      `--all-dead --topic ${topic}`;
    if (!this.#reported.has(subject)) {
      this.#reported.add(subject);
      try {
        this.#options.stream?.onUncoveredSubject?.({
          stream: stream.name,
          subject,
          streamSubjects: [...stream.subjects],
          error,
        });
      } catch {
        /* a throwing listener must not turn a dead letter into a failed publish call */
      }
    }
    return permanent(error);
  }
}

/**
 * Follows the connection's status: on `disconnect` every publish still waiting for its PubAck is
 * told, since the lost server will never send it (nats.js keeps such a request open until its
 * timeout, 5 s by default, which held a cluster failover for that long). The loop ends when the
 * connection closes.
 */
function watch(session: Session): void {
  const status = session.connection.status?.();
  if (!status) return;
  let watching = true;
  session.stopWatching = () => {
    watching = false;
    // nats.js's status iterator ends its `for await` on stop().
    (status as { stop?: () => void }).stop?.();
  };
  void (async () => {
    for await (const event of status) {
      if (!watching) break;
      if (event.type !== 'disconnect') continue;
      session.lostAt = Date.now();
      const server = typeof event.data === 'string' ? event.data : 'the server';
      for (const lost of [...session.onDisconnect]) lost(server);
    }
  })().catch(() => undefined);
}

/** The trace context as NATS headers (`Nats-Msg-Id` is added to them by `msgID`). */
function traceHeaders(session: Session, message: OutgoingMessage): { headers?: NatsHeadersLike } {
  if (!session.headers) return {};
  const trace = brokerTraceHeaders(message);
  if (trace.traceparent === undefined) return {};
  const headers = session.headers();
  for (const [key, value] of Object.entries(trace)) headers.set(key, value);
  return { headers };
}

function encode(message: OutgoingMessage): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(toEnvelope(message)));
}

function isTimeout(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === 'TIMEOUT';
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
