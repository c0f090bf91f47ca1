import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bindRedisStreams, outboxStreamKey } from '../../../src/consumer/bindings/redis-streams.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { requireService } from '../../helpers/services.js';
import { effectConsumer } from '../../fixtures/consumer/effects.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';
import { eventually } from '../../fixtures/consumer/eventually.js';

const up = await requireService('Redis', '127.0.0.1', 6379);

describe.skipIf(!up)('Redis Streams consumer group binding', () => {
  let db: TestDatabase;
  let redis: Redis;
  let reader: Redis;
  const topic = `ctest${randomBytes(4).toString('hex')}.charge`;
  const key = outboxStreamKey(topic);

  beforeAll(async () => {
    db = await createTestDatabase();
    redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true });
    await redis.connect();
    reader = redis.duplicate();
  });
  afterAll(async () => {
    await redis.del(key, `outbox:dead:${topic}`);
    reader.disconnect();
    redis.disconnect();
    await db.drop();
  });

  it('delivers once, XACKs after the record, re-claims after a failure, dead-letters poison', async () => {
    const pendingInHandler: number[] = [];
    const fixture = await effectConsumer(db.pool, 'billing', async () => {
      const summary = (await redis.xpending(key, 'billing')) as [number, ...unknown[]];
      pendingInHandler.push(summary[0]);
    });
    const binding = await bindRedisStreams(reader, fixture.consumer, {
      topics: [topic],
      group: 'billing',
      consumerName: `worker-${process.pid}`,
      blockMs: 200,
      claimIdleMs: 200,
    });
    const ok = makeEnvelope({ topic });
    const flaky = makeEnvelope({ topic, payload: { failTimes: 1 } });
    await redis.xadd(key, '*', 'id', 'poison-1', 'envelope', '{nope');
    for (const envelope of [ok, flaky, ok]) {
      await redis.xadd(
        key,
        '*',
        'envelope',
        JSON.stringify(envelope),
        'id',
        envelope.id,
        'aggregateId',
        envelope.aggregateId,
        'sequence',
        String(envelope.sequence),
      );
    }
    await eventually(async () => (await fixture.effects()).length === 2);
    await eventually(async () => ((await redis.xpending(key, 'billing')) as [number])[0] === 0);
    await binding.stop();

    expect((await fixture.effects()).sort()).toEqual([ok.id, flaky.id].sort());
    expect(fixture.seen.filter((id) => id === flaky.id)).toHaveLength(2);
    expect(pendingInHandler.every((n) => n >= 1)).toBe(true);
    const dead = await redis.xrange(`outbox:dead:${topic}`, '-', '+');
    expect(dead).toHaveLength(1);
    expect(dead[0]![1]).toEqual(expect.arrayContaining(['envelope', '{nope', 'reason', 'poison']));
  });
});
