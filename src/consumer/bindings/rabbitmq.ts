import type { Consumer } from '../create-consumer.js';
import type { RunningBinding } from './nats.js';
import { observe, reportDead, type BindingHooks } from './settle.js';

/** The subset of an `amqplib` message the binding reads. */
export interface AmqpMessageLike {
  content: Buffer;
  fields: { redelivered: boolean; routingKey: string };
  properties: { messageId?: string; headers?: Record<string, unknown> };
}

/** The subset of an `amqplib` (promise API) `Channel` the binding calls. */
export interface AmqpChannelLike {
  consume(
    queue: string,
    onMessage: (message: AmqpMessageLike | null) => void,
    options?: { noAck?: boolean },
  ): Promise<{ consumerTag: string }>;
  cancel(consumerTag: string): Promise<unknown>;
  prefetch(count: number): Promise<unknown>;
  ack(message: AmqpMessageLike): void;
  nack(message: AmqpMessageLike, allUpTo?: boolean, requeue?: boolean): void;
}

/** The exchange every outbox publisher routes to: a durable topic exchange, routing key = topic. */
export const OUTBOX_EXCHANGE = 'outbox';

/** Options of {@link bindRabbitMq}. */
export interface RabbitMqBindingOptions extends BindingHooks<AmqpMessageLike> {
  /** Unacknowledged deliveries at once (`basic.qos`). Default 10. */
  prefetch?: number;
  /**
   * RabbitMQ cannot delay a requeue, so a retry is held unacknowledged for its delay, then
   * requeued. This caps the hold, in ms, so a long deferral does not pin a prefetch slot. Default
   * 30 000.
   */
  maxHoldMs?: number;
}

/**
 * Consumes a queue bound to the `outbox` exchange with manual acks. Wire format: routing key =
 * topic, body = envelope JSON, `messageId` = message id. Settling: ack → `ack`; retry → held for
 * the delay, then `nack(requeue)`; dead → `onDead` then `nack(requeue: false)`, which routes to
 * the queue's dead-letter exchange when it has one (see {@link assertOutboxQueue}).
 *
 * @example
 * ```ts
 * import amqp from 'amqplib';
 * const channel = await (await amqp.connect('amqp://127.0.0.1')).createChannel();
 * await assertOutboxQueue(channel, { queue: 'mailer', routingKeys: ['mail.*'] });
 * const binding = await bindRabbitMq(channel, 'mailer', consumer);
 * ```
 */
export async function bindRabbitMq(
  channel: AmqpChannelLike,
  queue: string,
  consumer: Consumer,
  options: RabbitMqBindingOptions = {},
): Promise<RunningBinding> {
  const maxHoldMs = options.maxHoldMs ?? 30_000;
  const held = new Map<AmqpMessageLike, NodeJS.Timeout>();
  const inFlight = new Set<Promise<void>>();
  let stopping = false;

  const safely = (action: () => void) => {
    try {
      action();
    } catch (error) {
      options.onError?.(error); // channel closed: the broker requeues unacked messages itself
    }
  };

  const requeueLater = (message: AmqpMessageLike, delayMs: number) => {
    if (stopping) return safely(() => channel.nack(message, false, true));
    const timer = setTimeout(
      () => {
        held.delete(message);
        safely(() => channel.nack(message, false, true));
      },
      Math.min(delayMs, maxHoldMs),
    );
    held.set(message, timer);
  };

  const settle = async (message: AmqpMessageLike) => {
    const result = await consumer.handle(message.content, {
      attempt: attemptOf(message),
      messagingSystem: 'rabbitmq',
    });
    observe(options, result, message);
    if (result.action === 'ack') safely(() => channel.ack(message));
    else if (result.action === 'retry') requeueLater(message, result.delayMs ?? 0);
    else if (await reportDead(options, message, result))
      safely(() => channel.nack(message, false, false));
    else requeueLater(message, 1_000);
  };

  await channel.prefetch(options.prefetch ?? 10);
  const { consumerTag } = await channel.consume(
    queue,
    (message) => {
      if (message === null) {
        options.onError?.(new Error(`RabbitMQ cancelled the consumer of queue "${queue}"`));
        return;
      }
      const task = settle(message)
        .catch((error: unknown) => options.onError?.(error))
        .finally(() => inFlight.delete(task));
      inFlight.add(task);
    },
    { noAck: false },
  );

  return {
    async stop() {
      stopping = true;
      await channel.cancel(consumerTag);
      await Promise.all(inFlight);
      for (const [message, timer] of held) {
        clearTimeout(timer);
        safely(() => channel.nack(message, false, true));
      }
      held.clear();
    },
  };
}

/** Delivery attempt: quorum queues count it (`x-delivery-count`); classic ones only flag it. */
function attemptOf(message: AmqpMessageLike): number {
  const count = message.properties.headers?.['x-delivery-count'];
  if (typeof count === 'number') return count + 1;
  return message.fields.redelivered ? 2 : 1;
}

/** The subset of a `Channel` {@link assertOutboxQueue} calls. */
export interface AmqpTopologyChannelLike {
  assertExchange(name: string, type: string, options?: { durable?: boolean }): Promise<unknown>;
  assertQueue(
    name: string,
    options?: { durable?: boolean; arguments?: Record<string, unknown> },
  ): Promise<unknown>;
  bindQueue(queue: string, exchange: string, pattern: string): Promise<unknown>;
}

/**
 * Declares the `outbox` topic exchange, a durable queue bound to `routingKeys` (topic patterns
 * such as `payment.*`), and, with `deadLetterExchange`, where dead deliveries go.
 */
export async function assertOutboxQueue(
  channel: AmqpTopologyChannelLike,
  options: { queue: string; routingKeys: readonly string[]; deadLetterExchange?: string },
): Promise<void> {
  await channel.assertExchange(OUTBOX_EXCHANGE, 'topic', { durable: true });
  await channel.assertQueue(options.queue, {
    durable: true,
    ...(options.deadLetterExchange
      ? { arguments: { 'x-dead-letter-exchange': options.deadLetterExchange } }
      : {}),
  });
  for (const key of options.routingKeys)
    await channel.bindQueue(options.queue, OUTBOX_EXCHANGE, key);
}
