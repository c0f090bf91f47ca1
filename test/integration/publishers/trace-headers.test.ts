import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, ROOT_CONTEXT, trace, TraceFlags } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import amqp from 'amqplib';
import { Redis } from 'ioredis';
import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpPublisher } from '../../../src/publishers/http/index.js';
import { NatsJetStreamPublisher } from '../../../src/publishers/nats/index.js';
import type { OutgoingMessage, Publisher } from '../../../src/publishers/publisher.js';
import { RabbitMqPublisher } from '../../../src/publishers/rabbitmq/index.js';
import { RedisStreamsPublisher } from '../../../src/publishers/redis/index.js';
import { makeMessage, uniqueName } from '../../contract/messages.js';
import { requireService } from '../../helpers/services.js';

/**
 * Issue 19: each publisher puts the W3C trace context into the broker's OWN headers, so a
 * consumer that does not parse our envelope still continues the trace: the message's
 * `traceparent`/`tracestate`, or — for a message without one, published by code of its own — the
 * active span's.
 */
const [natsUp, rabbitUp, redisUp] = await Promise.all([
  requireService('NATS JetStream', '127.0.0.1', 4222),
  requireService('RabbitMQ', '127.0.0.1', 5672),
  requireService('Redis', '127.0.0.1', 6379),
]);

const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const active = {
  traceId: '0af7651916cd43dd8448eb211c80319c',
  spanId: 'b7ad6b7169203331',
  traceFlags: TraceFlags.SAMPLED,
};
const ACTIVE_TRACEPARENT = `00-${active.traceId}-${active.spanId}-01`;

const traced = (topic: string): OutgoingMessage =>
  makeMessage({ topic, headers: { traceparent: TRACEPARENT, tracestate: 'shop=1' } });
const untraced = (topic: string): OutgoingMessage =>
  makeMessage({ topic, headers: { schema_version: '1' } });

/** Publishes inside an active span (no SDK needed: a span context is enough to inject). */
async function publishInSpan(publisher: Publisher, messages: OutgoingMessage[]) {
  const outcomes = await context.with(trace.setSpanContext(ROOT_CONTEXT, active), () =>
    publisher.publish(messages),
  );
  expect(outcomes.map((o) => o.status)).toEqual(messages.map(() => 'published'));
}

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
});
afterAll(() => {
  context.disable();
});

describe.runIf(natsUp)('NATS headers', () => {
  let nc: NatsConnection;
  const prefix = uniqueName('trh');
  const stream = prefix.toUpperCase();
  beforeAll(async () => {
    nc = await connect({ servers: '127.0.0.1:4222' });
    await (await nc.jetstreamManager()).streams.add({ name: stream, subjects: [`${prefix}.>`] });
  });
  afterAll(async () => {
    await (await nc.jetstreamManager()).streams.delete(stream).catch(() => undefined);
    await nc.close();
  });

  it('carry traceparent and tracestate beside Nats-Msg-Id, with our connection or the caller’s', async () => {
    for (const connection of ['nats://127.0.0.1:4222', nc] as const) {
      const publisher = new NatsJetStreamPublisher({ connection });
      await publishInSpan(publisher, [traced(`${prefix}.a`), untraced(`${prefix}.b`)]);
      await publisher.close();
    }
    const jsm = await nc.jetstreamManager();
    for (const seq of [1, 3]) {
      const stored = await jsm.streams.getMessage(stream, { seq });
      expect(stored.header.get('traceparent')).toBe(TRACEPARENT);
      expect(stored.header.get('tracestate')).toBe('shop=1');
      expect(stored.header.get('Nats-Msg-Id')).toMatch(/^[0-9a-f-]{36}$/);
    }
    for (const seq of [2, 4]) {
      const stored = await jsm.streams.getMessage(stream, { seq });
      expect(stored.header.get('traceparent')).toBe(ACTIVE_TRACEPARENT);
    }
  });
});

describe.runIf(rabbitUp)('AMQP headers', () => {
  it('carry the trace context', async () => {
    const exchange = uniqueName('aotrace.');
    const connection = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
    const channel = await connection.createChannel();
    await channel.assertExchange(exchange, 'topic', { durable: true });
    const { queue } = await channel.assertQueue('', { exclusive: true });
    await channel.bindQueue(queue, exchange, '#');
    const publisher = new RabbitMqPublisher({
      connection: 'amqp://guest:guest@127.0.0.1:5672',
      exchange,
    });
    try {
      await publishInSpan(publisher, [traced('order.a'), untraced('order.b')]);
      const received: Record<string, unknown>[] = [];
      for (let i = 0; i < 50 && received.length < 2; i++) {
        const message = await channel.get(queue, { noAck: true });
        if (message) received.push(message.properties.headers ?? {});
        else await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(received).toEqual([
        expect.objectContaining({ traceparent: TRACEPARENT, tracestate: 'shop=1' }),
        expect.objectContaining({ traceparent: ACTIVE_TRACEPARENT }),
      ]);
    } finally {
      await publisher.close();
      await channel.deleteExchange(exchange).catch(() => undefined);
      await connection.close();
    }
  });
});

describe.runIf(redisUp)('Redis stream fields', () => {
  it('carry the trace context', async () => {
    const keyPrefix = `${uniqueName('aotrace:')}:`;
    const redis = new Redis('redis://127.0.0.1:6379');
    const publisher = new RedisStreamsPublisher({
      connection: 'redis://127.0.0.1:6379',
      keyPrefix,
    });
    try {
      await publishInSpan(publisher, [traced('order.a'), untraced('order.b')]);
      const fields = async (topic: string) => {
        const [[, list]] = (await redis.xrange(`${keyPrefix}${topic}`, '-', '+')) as [
          string,
          string[],
        ][] as [[string, string[]]];
        return Object.fromEntries(
          list.flatMap((_, i) => (i % 2 === 0 ? [[list[i], list[i + 1]]] : [])),
        ) as Record<string, string>;
      };
      expect(await fields('order.a')).toMatchObject({
        traceparent: TRACEPARENT,
        tracestate: 'shop=1',
      });
      expect(await fields('order.b')).toMatchObject({ traceparent: ACTIVE_TRACEPARENT });
    } finally {
      await publisher.close();
      const keys = await redis.keys(`${keyPrefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      await redis.quit();
    }
  });
});

describe('HTTP headers', () => {
  it('carry the trace context', async () => {
    const seen: IncomingHttpHeaders[] = [];
    const server = createServer((request, response) => {
      seen.push(request.headers);
      request.resume();
      request.on('end', () => response.writeHead(200).end());
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const publisher = new HttpPublisher({
      url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
      concurrency: 1,
    });
    try {
      await publishInSpan(publisher, [traced('order.a'), untraced('order.b')]);
      expect(seen.map((h) => [h.traceparent, h.tracestate])).toEqual([
        [TRACEPARENT, 'shop=1'],
        [ACTIVE_TRACEPARENT, undefined],
      ]);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
