import amqp from 'amqplib';
import { Redis } from 'ioredis';
import { connect, consumerOpts, type NatsConnection } from 'nats';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, type Publisher } from '../../../src/index.js';
import { NatsJetStreamPublisher } from '../../../src/publishers/nats/nats-jetstream-publisher.js';
import { RabbitMqPublisher } from '../../../src/publishers/rabbitmq/rabbitmq-publisher.js';
import { RedisStreamsPublisher } from '../../../src/publishers/redis/redis-streams-publisher.js';
import { parseEnvelope } from '../../../src/publishers/envelope.js';
import { createCollector, type Collector } from '../../contract/collector.js';
import { uniqueName } from '../../contract/messages.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { checkHistory, expectedOf } from '../../helpers/history.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../../helpers/outbox-fixtures.js';
import { requireService } from '../../helpers/services.js';

// Outbox → two dispatchers → real broker → the broker's own client, checked by the history
// checker: nothing lost, per-aggregate order kept (each broker here keeps publish order within
// one stream/queue), duplicates only where a publish was retried.

/** Generous bound for a whole run on a loaded 2-core machine; not a performance assertion. */
const E2E_TIMEOUT_MS = 300_000;
const AGGREGATES = 100;
const PER_AGGREGATE = 50; // 5,000 messages

const natsUp = await requireService('NATS (JetStream)', '127.0.0.1', 4222);
const rabbitUp = await requireService('RabbitMQ', '127.0.0.1', 5672);
const redisUp = await requireService('Redis', '127.0.0.1', 6379);

interface BrokerUnderTest {
  /** Publisher for one dispatcher (each gets its own connection). */
  publisher(): Publisher;
  /** Starts consuming the topic into the collector; returns a stop function. */
  consume(topic: string, collector: Collector): Promise<() => Promise<void>>;
  /** Whether the broker drops re-publishes of an id. */
  dedupes: boolean;
}

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());
beforeEach(async () => {
  await resetOutbox(db.pool);
});

async function runEndToEnd(broker: BrokerUnderTest): Promise<void> {
  const topic = `${uniqueName('e2e')}.charge`;
  const collector = createCollector();
  const stopConsumer = await broker.consume(topic, collector);
  const enqueued = await enqueueCommitted(db.pool, manyMessages(AGGREGATES, PER_AGGREGATE, topic));
  const publishers = [broker.publisher(), broker.publisher()];
  const dispatchers = publishers.map((publisher, i) =>
    createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      id: `e2e-${i}`,
      batchSize: 200,
      pollIntervalMs: 20,
      backoff: { baseMs: 50, maxMs: 500, jitterMs: 50 },
    }),
  );
  try {
    for (const dispatcher of dispatchers) dispatcher.start();
    const ids = new Set(enqueued.map((m) => m.messageId));
    await collector.waitFor(
      (deliveries) => new Set(deliveries.map((d) => parseEnvelope(d.body).id)).size >= ids.size,
      `${ids.size} distinct messages at the consumer`,
      240_000,
    );
  } finally {
    for (const dispatcher of dispatchers) await dispatcher.stop();
    for (const publisher of publishers) await publisher.close?.();
    await stopConsumer();
  }

  const report = checkHistory(
    expectedOf(enqueued),
    // Arrival order at the consumer: n+1 arriving before n is an order violation.
    collector.deliveries.map((d, i) => ({
      messageId: parseEnvelope(d.body).id,
      publisher: 'broker',
      start: i,
      end: i + 0.5,
    })),
  );
  expect(report.lost).toEqual([]);
  expect(report.unexpected).toEqual([]);
  expect(report.orderViolations).toEqual([]);
  const retried = dispatchers.reduce((sum, d) => sum + d.stats().retried, 0);
  if (broker.dedupes) expect(report.duplicates).toBe(0);
  else expect(report.duplicates).toBeLessThanOrEqual(retried);
  const { rows } = await db.pool.query<{ n: number }>(
    'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL',
  );
  expect(rows[0]!.n).toBe(0);
}

describe.runIf(natsUp)('end to end: outbox → 2 dispatchers → NATS JetStream', () => {
  const prefix = `${uniqueName('aoe2e')}.`;
  const stream = uniqueName('AOE2E_');
  let nc: NatsConnection;
  beforeAll(async () => {
    nc = await connect({ servers: '127.0.0.1:4222' });
    await (await nc.jetstreamManager()).streams.add({ name: stream, subjects: [`${prefix}>`] });
  });
  afterAll(async () => {
    await (await nc.jetstreamManager()).streams.delete(stream).catch(() => undefined);
    await nc.close();
  });

  it(
    'delivers 5,000 messages: none lost, per-aggregate order kept, no duplicates',
    async () => {
      await runEndToEnd({
        dedupes: true,
        publisher: () =>
          new NatsJetStreamPublisher({
            connection: 'nats://127.0.0.1:4222',
            subjectPrefix: prefix,
          }),
        async consume(topic, collector) {
          // A JetStream consumer reading the stream (legacy push API: the server here is 2.9).
          const options = consumerOpts();
          options.orderedConsumer();
          const subscription = await nc.jetstream().subscribe(prefix + topic, options);
          void (async () => {
            for await (const m of subscription) collector.push({ body: m.string() });
          })();
          return async () => subscription.unsubscribe();
        },
      });
    },
    E2E_TIMEOUT_MS,
  );
});

describe.runIf(rabbitUp)('end to end: outbox → 2 dispatchers → RabbitMQ', () => {
  const exchange = uniqueName('aoe2e.');
  let connection: amqp.ChannelModel;
  beforeAll(async () => {
    connection = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
  });
  afterAll(async () => {
    const channel = await connection.createChannel();
    await channel.deleteExchange(exchange).catch(() => undefined);
    await connection.close();
  });

  it(
    'delivers 5,000 messages: none lost, per-aggregate order kept',
    async () => {
      await runEndToEnd({
        dedupes: false,
        publisher: () =>
          new RabbitMqPublisher({ connection: 'amqp://guest:guest@127.0.0.1:5672', exchange }),
        async consume(topic, collector) {
          const channel = await connection.createChannel();
          await channel.assertExchange(exchange, 'topic', { durable: true });
          const { queue } = await channel.assertQueue('', { exclusive: true });
          await channel.bindQueue(queue, exchange, topic);
          await channel.consume(queue, (m) => m && collector.push({ body: m.content.toString() }), {
            noAck: true,
          });
          return () => channel.close();
        },
      });
    },
    E2E_TIMEOUT_MS,
  );
});

describe.runIf(redisUp)('end to end: outbox → 2 dispatchers → Redis Streams', () => {
  const keyPrefix = `${uniqueName('aoe2e:')}:`;
  let redis: Redis;
  beforeAll(() => {
    redis = new Redis('redis://127.0.0.1:6379');
  });
  afterAll(async () => {
    const keys = await redis.keys(`${keyPrefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  it(
    'delivers 5,000 messages: none lost, per-aggregate order kept, no duplicates',
    async () => {
      await runEndToEnd({
        dedupes: true,
        publisher: () =>
          new RedisStreamsPublisher({ connection: 'redis://127.0.0.1:6379', keyPrefix }),
        async consume(topic, collector) {
          const reader = new Redis('redis://127.0.0.1:6379');
          let last = '0';
          let running = true;
          const loop = (async () => {
            while (running) {
              const result = await reader.xread(
                'COUNT',
                1000,
                'BLOCK',
                100,
                'STREAMS',
                keyPrefix + topic,
                last,
              );
              for (const [, entries] of result ?? []) {
                for (const [id, fields] of entries) {
                  last = id;
                  collector.push({ body: fields[fields.indexOf('envelope') + 1]! });
                }
              }
            }
          })();
          return async () => {
            running = false;
            await loop;
            await reader.quit();
          };
        },
      });
    },
    E2E_TIMEOUT_MS,
  );
});
