import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisStreamsPublisher } from '../../../src/publishers/redis/redis-streams-publisher.js';
import { createCollector } from '../../contract/collector.js';
import { makeMessage, uniqueName } from '../../contract/messages.js';
import { describePublisherConformance } from '../../contract/publisher-conformance.js';
import { closedPort, requireService } from '../../helpers/services.js';

const REDIS_URL = 'redis://127.0.0.1:6379';
const redisUp = await requireService('Redis', '127.0.0.1', 6379);

describe.runIf(redisUp)('Redis Streams', () => {
  // Own key prefix per run: the server is shared.
  const keyPrefix = `${uniqueName('aotest:')}:`;
  let redis: Redis;

  beforeAll(() => {
    redis = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    const keys = await redis.keys(`${keyPrefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    await redis.quit();
  });

  describePublisherConformance({
    name: 'RedisStreamsPublisher (real Redis)',
    capabilities: {
      dedupesById: true,
      ordersPerAggregate: true,
      carriesNativeId: true,
      // One EVALSHA (XADD) per message: nothing caps a call.
      batchLimit: undefined,
      // A bulk string may be 512 MiB (proto-max-bulk-len): too large to send in a test.
      maxMessageBytes: undefined,
      // The stream key of this topic holds a string: XADD fails with WRONGTYPE.
      failingStatus: 'retryable',
      failingMessage: async (message) => {
        const topic = uniqueName('wrongtype.');
        await redis.set(`${keyPrefix}${topic}`, 'not a stream');
        return { ...message, topic };
      },
    },
    create: () => new RedisStreamsPublisher({ connection: REDIS_URL, keyPrefix }),
    createUnreachable: async () =>
      new RedisStreamsPublisher({ connection: `redis://127.0.0.1:${await closedPort()}` }),
    collector: createCollector,
    throughProxy: {
      brokerPort: () => 6379,
      create: (port) =>
        new RedisStreamsPublisher({ connection: `redis://127.0.0.1:${port}`, keyPrefix }),
    },
    async receive(topics, collector) {
      // A consumer of the test's own, reading the streams with XREAD on a second connection.
      const reader = new Redis(REDIS_URL);
      const keys = topics.map((topic) => keyPrefix + topic);
      const lastIds = keys.map(() => '0');
      let running = true;
      const loop = (async () => {
        while (running) {
          const result = await reader.xread(
            'COUNT',
            100,
            'BLOCK',
            50,
            'STREAMS',
            ...keys,
            ...lastIds,
          );
          for (const [key, entries] of result ?? []) {
            for (const [entryId, fields] of entries) {
              lastIds[keys.indexOf(key)] = entryId;
              const record = Object.fromEntries(
                fields.flatMap((_, i) => (i % 2 === 0 ? [[fields[i], fields[i + 1]]] : [])),
              ) as Record<string, string>;
              collector.push({ body: record.envelope!, nativeId: record.id });
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

  describe('RedisStreamsPublisher', () => {
    it('adds an entry with id, topic, aggregateId, sequence and envelope fields', async () => {
      const publisher = new RedisStreamsPublisher({ connection: REDIS_URL, keyPrefix });
      try {
        const message = makeMessage({ topic: uniqueName('fields.'), sequence: 7 });
        expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);
        const entries = await redis.xrange(`${keyPrefix}${message.topic}`, '-', '+');
        expect(entries).toHaveLength(1);
        const fields = entries[0]![1];
        expect(fields.slice(0, 8)).toEqual([
          'id',
          message.id,
          'topic',
          message.topic,
          'aggregateId',
          message.aggregateId,
          'sequence',
          '7',
        ]);
        expect(fields[8]).toBe('envelope');
        expect(JSON.parse(fields[9]!).id).toBe(message.id);
        // The dedup key points at the entry and expires.
        expect(await redis.get(`${keyPrefix}dedup:${message.id}`)).toBe(entries[0]![0]);
        expect(await redis.pttl(`${keyPrefix}dedup:${message.id}`)).toBeGreaterThan(0);
      } finally {
        await publisher.close();
      }
    });

    it('dedupes a re-publish from another publisher instance (after a dispatcher crash)', async () => {
      const topic = uniqueName('crash.');
      const message = makeMessage({ topic });
      const first = new RedisStreamsPublisher({ connection: REDIS_URL, keyPrefix });
      const second = new RedisStreamsPublisher({ connection: REDIS_URL, keyPrefix });
      try {
        expect(await first.publish([message])).toEqual([{ status: 'published' }]);
        expect(await second.publish([{ ...message, attempts: 2 }])).toEqual([
          { status: 'published' },
        ]);
        expect(await redis.xlen(`${keyPrefix}${topic}`)).toBe(1);
      } finally {
        await first.close();
        await second.close();
      }
    });

    it('does not mark a message delivered when its XADD failed', async () => {
      const topic = uniqueName('wrongtype.');
      await redis.set(`${keyPrefix}${topic}`, 'not a stream');
      const publisher = new RedisStreamsPublisher({ connection: REDIS_URL, keyPrefix });
      try {
        const message = makeMessage({ topic });
        const [failed] = await publisher.publish([message]);
        expect(failed!.status).toBe('retryable');
        expect(failed!.status === 'retryable' && failed!.error).toMatch(/WRONGTYPE/);
        expect(await redis.exists(`${keyPrefix}dedup:${message.id}`)).toBe(0);

        // Once the key is fixed, the retry goes through: it was not swallowed as a duplicate.
        await redis.del(`${keyPrefix}${topic}`);
        expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);
        expect(await redis.xlen(`${keyPrefix}${topic}`)).toBe(1);
      } finally {
        await publisher.close();
      }
    });

    it('uses a client it is given and leaves it open on close()', async () => {
      const publisher = new RedisStreamsPublisher({ connection: redis, keyPrefix });
      expect(await publisher.publish([makeMessage({ topic: uniqueName('given.') })])).toEqual([
        { status: 'published' },
      ]);
      await publisher.close();
      expect(await redis.ping()).toBe('PONG');
    });

    it('trims with MAXLEN ~ when maxLen is set', async () => {
      const topic = uniqueName('trim.');
      const publisher = new RedisStreamsPublisher({ connection: redis, keyPrefix, maxLen: 10 });
      const messages = Array.from({ length: 300 }, () => makeMessage({ topic }));
      const outcomes = await publisher.publish(messages);
      expect(outcomes.every((o) => o.status === 'published')).toBe(true);
      // Approximate trimming removes whole macro nodes (100 entries by default): well below 300.
      expect(await redis.xlen(`${keyPrefix}${topic}`)).toBeLessThan(300);
    });

    it('sends to the route destination as the stream key', async () => {
      const key = `${keyPrefix}${uniqueName('routed')}`;
      const publisher = new RedisStreamsPublisher({ connection: redis, keyPrefix });
      await publisher.publish([makeMessage()], { destination: key });
      expect(await redis.xlen(key)).toBe(1);
    });
  });
});
