import { toEnvelope } from '../envelope.js';
import { brokerTraceHeaders } from '../trace-headers.js';
import { importPeer } from '../optional-peer.js';
import { allRetryable, published, retryable } from '../outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from '../publisher.js';
import type {
  AmqpConfirmChannelLike,
  AmqpConnectionLike,
  AmqpModuleLike,
  AmqpReturnedMessageLike,
} from './amqp-client.js';

/** Options of {@link RabbitMqPublisher}. */
export interface RabbitMqPublisherOptions {
  /**
   * `amqp(s)://user:pass@host:5672/vhost` (the publisher connects itself, with `amqplib`) or an
   * existing `ChannelModel` from `amqplib.connect` (you keep ownership: `close()` closes only the
   * publisher's channel).
   */
  connection: string | AmqpConnectionLike;
  /** Topic exchange messages are published to. Default `outbox`. */
  exchange?: string;
  /** Declare the exchange (type `topic`, durable) on connect. Default true. */
  assertExchange?: boolean;
  /** Socket connect timeout when the publisher connects itself. Default 10 000 ms. */
  connectTimeoutMs?: number;
  /**
   * How long a publish waits while the broker blocks the connection (`connection.blocked`: a
   * memory or disk alarm; RabbitMQ then confirms nothing) before it gives up: its messages come
   * back `retryable` with a Retry-After, so the dispatcher pauses the route and charges no
   * attempt (G9), and publishing goes on once the alarm clears. Keep it well under the
   * dispatcher's lease (30 s by default), which would otherwise end the wait as a charged
   * timeout. Default 5 000 ms.
   */
  blockedWaitMs?: number;
  /** Loads the `amqplib` module (tests; bundlers). Default: `import('amqplib')`. */
  loadModule?: () => Promise<AmqpModuleLike>;
}

/** Default exchange of {@link RabbitMqPublisher}. */
export const DEFAULT_AMQP_EXCHANGE = 'outbox';

/**
 * The Retry-After of a publish given up while the broker blocks publishers: it pauses the route
 * at once (no attempt charged), and the route's probe, itself waiting up to `blockedWaitMs` for
 * the unblock, finds out when the alarm has cleared.
 */
const BLOCKED_RETRY_AFTER_MS = 1_000;

/** Settles one in-flight publish: with the confirm's error, or with an outcome decided for it. */
type Settle = (error: unknown, instead?: PublishOutcome) => void;

interface Session {
  connection: AmqpConnectionLike;
  channel: AmqpConfirmChannelLike;
  /** Ids handed back by `basic.return`; the broker sends the return before the ack. */
  returned: Map<string, AmqpReturnedMessageLike>;
  /**
   * Settles every in-flight publish when the channel dies (their confirms never come), or when
   * a block outlasts `blockedWaitMs`.
   */
  failPending: Set<Settle>;
  closed: boolean;
  /** The broker's reason while it blocks this connection (`connection.blocked`). */
  blocked: string | undefined;
  /** Gives up the in-flight publishes of a block that lasts `blockedWaitMs`. */
  blockTimer: ReturnType<typeof setTimeout> | undefined;
  /** Wakes whatever waits on the connection: unblocked, closed, a block given up. */
  wake: Set<() => void>;
}

/**
 * Publishes to a RabbitMQ topic exchange on a confirm channel: `published` means the broker
 * confirmed (`basic.ack`) the message. Routing key = topic (or the router's destination),
 * `persistent`, `messageId` = message id, message headers as AMQP headers, body = envelope JSON.
 *
 * Failures, all `retryable`: a `basic.nack` (the broker could not take responsibility for the
 * message); a `basic.return` — published with `mandatory`, a message no queue is bound for comes
 * back instead of being dropped. Unroutable is retryable, not permanent, because its usual cause
 * is a binding that is not declared *yet* (consumer deployed after the dispatcher); a binding that
 * never appears ends in the dead letters after `maxAttempts`, where it can be replayed. A lost
 * connection or closed channel is retryable too, and the next call reconnects.
 *
 * A memory or disk alarm makes the broker block publishing connections (`connection.blocked`):
 * it stops reading from them, so nothing is confirmed until the alarm clears. A publish then
 * waits for the unblock up to `blockedWaitMs`, and gives up `retryable` with a Retry-After that
 * pauses the route without charging an attempt (G9); what was already sent stays in the socket
 * and the broker takes it after the unblock, so a message given up this way may arrive twice.
 *
 * RabbitMQ does not deduplicate: a re-publish after a crash is a second delivery with the same
 * `messageId`, which the consumer runtime drops.
 */
export class RabbitMqPublisher implements Publisher {
  readonly #options: RabbitMqPublisherOptions;
  readonly #exchange: string;
  #session: Promise<Session> | undefined;

  constructor(options: RabbitMqPublisherOptions) {
    this.#options = options;
    this.#exchange = options.exchange ?? DEFAULT_AMQP_EXCHANGE;
  }

  /** `rabbitmq`: the `messaging.system` of this publisher's `send` spans. */
  messagingSystem(): string {
    return 'rabbitmq';
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
      return allRetryable(messages.length, `RabbitMQ: ${describe(error)}`);
    }
    // One bound for the whole call: a blocked broker costs it blockedWaitMs at most.
    const waitUntil = Date.now() + this.#blockedWaitMs;
    const pending: Promise<PublishOutcome>[] = [];
    for (const message of messages) {
      if (session.blocked !== undefined && !session.closed)
        await waitFor(session, () => session.blocked === undefined, waitUntil, options.signal);
      if (options.signal?.aborted || session.closed) {
        pending.push(
          Promise.resolve(
            retryable(session.closed ? 'RabbitMQ: channel closed' : 'publish aborted'),
          ),
        );
        continue;
      }
      if (session.blocked !== undefined) {
        pending.push(Promise.resolve(blockedOutcome(session.blocked)));
        continue;
      }
      const routingKey = options.destination ?? message.topic;
      const { outcome, writable } = this.#publishOne(session, message, routingKey);
      pending.push(outcome);
      // Respect the socket's backpressure rather than buffering a whole batch in memory. A
      // blocked broker reads nothing, so that wait has the same bound.
      if (!writable && !session.closed) {
        let drain = false;
        const onDrain = () => {
          drain = true;
          for (const wake of [...session.wake]) wake();
        };
        session.channel.once('drain', onDrain);
        await waitFor(session, () => drain, waitUntil, options.signal);
        session.channel.removeListener('drain', onDrain);
      }
    }
    return Promise.all(pending);
  }

  get #blockedWaitMs(): number {
    return this.#options.blockedWaitMs ?? 5_000;
  }

  #publishOne(
    session: Session,
    message: OutgoingMessage,
    routingKey: string,
  ): { outcome: Promise<PublishOutcome>; writable: boolean } {
    let writable = true;
    const outcome = new Promise<PublishOutcome>((resolve) => {
      const settle: Settle = (error, instead) => {
        if (!session.failPending.delete(settle)) return;
        const returned = session.returned.get(message.id);
        session.returned.delete(message.id);
        if (instead) resolve(instead);
        else if (error) resolve(retryable(`RabbitMQ: ${describe(error)}`));
        else if (returned) resolve(retryable(unroutableText(returned, this.#exchange, routingKey)));
        else resolve(published());
      };
      session.failPending.add(settle);
      try {
        writable = session.channel.publish(
          this.#exchange,
          routingKey,
          Buffer.from(JSON.stringify(toEnvelope(message))),
          {
            persistent: true,
            mandatory: true,
            messageId: message.id,
            contentType: 'application/json',
            type: message.topic,
            appId: 'agent-outbox',
            timestamp: Math.floor(message.createdAt.getTime() / 1000),
            headers: message.headers.traceparent
              ? message.headers
              : { ...message.headers, ...brokerTraceHeaders(message) },
          },
          (error) =>
            settle(
              error ? (error instanceof Error ? error : 'message nacked by the broker') : undefined,
            ),
        );
      } catch (error) {
        settle(error);
      }
    });
    return { outcome, writable };
  }

  /** Closes the publisher's channel, and the connection if the publisher opened it. */
  async close(): Promise<void> {
    const session = this.#session;
    this.#session = undefined;
    if (!session) return;
    const opened = await session.catch(() => undefined);
    if (!opened) return;
    if (!opened.closed) await opened.channel.close().catch(() => undefined);
    if (typeof this.#options.connection === 'string') {
      await opened.connection.close().catch(() => undefined);
    }
  }

  #connect(): Promise<Session> {
    const current = this.#session;
    if (current) {
      return current.then((session) => {
        if (!session.closed) return session;
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
    const ownsConnection = typeof this.#options.connection === 'string';
    let connection: AmqpConnectionLike;
    if (typeof this.#options.connection === 'string') {
      const load =
        this.#options.loadModule ??
        (() =>
          importPeer(
            'amqplib',
            'RabbitMqPublisher',
            () => import('amqplib'),
          ) as unknown as Promise<AmqpModuleLike>);
      const amqp = await load();
      connection = await amqp.connect(this.#options.connection, {
        timeout: this.#options.connectTimeoutMs ?? 10_000,
      });
      // Without a listener an 'error' event would crash the process; 'close' follows it.
      connection.on('error', () => undefined);
    } else {
      connection = this.#options.connection;
    }
    try {
      const channel = await connection.createConfirmChannel();
      const session: Session = {
        connection,
        channel,
        returned: new Map(),
        failPending: new Set(),
        closed: false,
        blocked: undefined,
        blockTimer: undefined,
        wake: new Set(),
      };
      const wakeAll = () => {
        for (const wake of [...session.wake]) wake();
      };
      const onBlocked = (reason: unknown) => {
        session.blocked = typeof reason === 'string' && reason !== '' ? reason : 'no reason given';
        clearTimeout(session.blockTimer);
        // What was sent before the block waits in the socket, unconfirmed, until it lifts.
        session.blockTimer = setTimeout(() => {
          if (session.blocked === undefined) return;
          const outcome = blockedOutcome(session.blocked);
          for (const settle of [...session.failPending]) settle(undefined, { ...outcome });
          wakeAll();
        }, this.#blockedWaitMs);
      };
      const onUnblocked = () => {
        session.blocked = undefined;
        clearTimeout(session.blockTimer);
        wakeAll();
      };
      connection.on('blocked', onBlocked);
      connection.on('unblocked', onUnblocked);
      channel.on('error', () => undefined);
      channel.on('return', (returned: AmqpReturnedMessageLike) => {
        const id = returned.properties.messageId;
        if (id !== undefined) session.returned.set(id, returned);
      });
      channel.on('close', () => {
        session.closed = true;
        clearTimeout(session.blockTimer);
        connection.removeListener?.('blocked', onBlocked);
        connection.removeListener?.('unblocked', onUnblocked);
        for (const settle of [...session.failPending])
          settle(new Error('channel closed before the broker confirmed'));
        wakeAll();
      });
      if (this.#options.assertExchange ?? true) {
        await channel.assertExchange(this.#exchange, 'topic', { durable: true });
      }
      return session;
    } catch (error) {
      if (ownsConnection) await connection.close().catch(() => undefined);
      throw error;
    }
  }
}

/**
 * Waits until `ready()` holds, the session closes, `until` (epoch ms) passes or `signal` aborts,
 * re-checking whenever the session wakes its waiters.
 */
async function waitFor(
  session: Session,
  ready: () => boolean,
  until: number,
  signal: AbortSignal | undefined,
): Promise<void> {
  while (!ready() && !session.closed && !signal?.aborted && Date.now() < until) {
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        session.wake.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, until - Date.now()));
      session.wake.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }
}

/** What a publish gets back when the broker blocked it for `blockedWaitMs`. */
function blockedOutcome(reason: string): PublishOutcome {
  return retryable(
    `RabbitMQ: the broker blocks publishers (connection.blocked: ${reason}): a memory or disk alarm is on (rabbitmqctl status lists it under Alarms); publishing goes on by itself once it clears, no attempt is charged meanwhile`,
    BLOCKED_RETRY_AFTER_MS,
  );
}

function unroutableText(
  returned: AmqpReturnedMessageLike,
  exchange: string,
  routingKey: string,
): string {
  const reply = returned.fields.replyCode
    ? ` (${returned.fields.replyCode} ${returned.fields.replyText ?? ''})`
    : '';
  return `RabbitMQ: unroutable — no queue is bound to exchange "${exchange}" for routing key "${routingKey}"${reply.trimEnd()}`;
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' && !error.message.includes(code)
      ? `${code} ${error.message}`
      : error.message;
  }
  return String(error);
}
