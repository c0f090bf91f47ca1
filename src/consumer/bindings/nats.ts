import type { Consumer } from '../create-consumer.js';
import { observe, reportDead, TaskSlots, type BindingHooks } from './settle.js';

/** The subset of a `nats` JetStream message (`JsMsg`) the binding calls. */
export interface JetStreamMessageLike {
  readonly data: Uint8Array;
  readonly subject: string;
  readonly info: { readonly deliveryCount: number };
  ack(): void;
  nak(millis?: number): void;
  term(): void;
  working(): void;
}

/** The subset of `ConsumerMessages` (what `consumer.consume()` returns) the binding calls. */
export interface JetStreamMessagesLike extends AsyncIterable<JetStreamMessageLike> {
  close(): Promise<void | Error>;
}

/** The subset of a `nats` JetStream pull `Consumer` (`js.consumers.get(stream, name)`). */
export interface JetStreamConsumerLike {
  consume(options?: { max_messages?: number; expires?: number }): Promise<JetStreamMessagesLike>;
}

/** Options of {@link bindNatsJetStream}. */
export interface NatsBindingOptions extends BindingHooks<JetStreamMessageLike> {
  /** Deliveries handled at once. Default 1 (keeps per-subject order of the stream). */
  concurrency?: number;
  /**
   * While a handler runs, tell the server every this many ms that the message is still being
   * worked on (`working()`), so a slow handler does not exceed the consumer's `ack_wait` and get
   * redelivered in parallel. Default 10 000; 0 disables.
   */
  workingIntervalMs?: number;
  /**
   * How long each pull request lives on the server (`expires` of `consume()`); the client expects
   * a heartbeat every half of it and pulls again after two missed ones. That is how a consumer
   * notices that its consumer's leader node died (a cluster loses a node): after about this
   * long, not at once. Default 30 000 (the `nats` client's); lower it to recover sooner, at the
   * price of a pull request that often while idle. At least 1 000.
   */
  pullExpiresMs?: number;
}

/** A running binding. */
export interface RunningBinding {
  /** Stops pulling; resolves once in-flight deliveries are settled. */
  stop(): Promise<void>;
}

/**
 * Feeds a JetStream pull consumer (durable, `ack_policy: explicit`) to a consumer. Wire format:
 * subject = topic, body = envelope JSON, `Nats-Msg-Id` = message id. Settling:
 * ack → `ack()`; retry → `nak(delayMs)` (the server redelivers after the delay); dead →
 * `onDead` then `term()` (never redelivered; JetStream emits a terminated advisory you can
 * subscribe to). The ack is sent only after the consumer recorded the effect.
 *
 * @example
 * ```ts
 * import { connect } from 'nats';
 * const nc = await connect({ servers: '127.0.0.1:4222' });
 * const source = await nc.jetstream().consumers.get('OUTBOX', 'mailer');
 * const binding = await bindNatsJetStream(source, consumer);
 * // ... on shutdown
 * await binding.stop();
 * ```
 */
export async function bindNatsJetStream(
  source: JetStreamConsumerLike,
  consumer: Consumer,
  options: NatsBindingOptions = {},
): Promise<RunningBinding> {
  const slots = new TaskSlots(options.concurrency ?? 1);
  const workingMs = options.workingIntervalMs ?? 10_000;
  const messages = await source.consume({
    max_messages: Math.max(2, (options.concurrency ?? 1) * 2),
    ...(options.pullExpiresMs !== undefined && { expires: options.pullExpiresMs }),
  });

  const settle = async (message: JetStreamMessageLike) => {
    const timer = workingMs > 0 ? setInterval(() => message.working(), workingMs) : undefined;
    timer?.unref();
    let result;
    try {
      result = await consumer.handle(message.data, {
        attempt: message.info.deliveryCount,
        messagingSystem: 'nats',
      });
    } finally {
      clearInterval(timer);
    }
    observe(options, result, message);
    if (result.action === 'ack') message.ack();
    else if (result.action === 'retry') message.nak(result.delayMs);
    // term() without a reason: servers before 2.10 ignore "+TERM <reason>" and would keep the
    // message pending. The reason reaches onResult/onDead instead.
    else if (await reportDead(options, message, result)) message.term();
    else message.nak(1_000);
  };

  const loop = (async () => {
    for await (const message of messages) {
      await slots.run(() => settle(message).catch((error: unknown) => options.onError?.(error)));
    }
    await slots.drain();
  })().catch((error: unknown) => options.onError?.(error));

  return {
    async stop() {
      await messages.close();
      await loop;
    },
  };
}
