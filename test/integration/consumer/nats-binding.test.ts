import { randomBytes } from 'node:crypto';
import { AckPolicy, connect, headers, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bindNatsJetStream } from '../../../src/consumer/bindings/nats.js';
import type { DeliveryResult } from '../../../src/consumer/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { requireService } from '../../helpers/services.js';
import { effectConsumer } from '../../fixtures/consumer/effects.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';
import { eventually } from '../../fixtures/consumer/eventually.js';

const up = await requireService('NATS JetStream', '127.0.0.1', 4222);

describe.skipIf(!up)('NATS JetStream pull consumer binding', () => {
  let db: TestDatabase;
  let nc: NatsConnection;
  const suffix = randomBytes(4).toString('hex');
  const stream = `OUTBOX_CONSUMER_${suffix}`;
  const topic = `ctest${suffix}.charge`;

  beforeAll(async () => {
    db = await createTestDatabase();
    nc = await connect({ servers: '127.0.0.1:4222' });
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: stream, subjects: [`ctest${suffix}.>`] });
    await jsm.consumers.add(stream, {
      durable_name: 'billing',
      ack_policy: AckPolicy.Explicit,
      ack_wait: 30_000_000_000,
    });
  });
  afterAll(async () => {
    await (await nc.jetstreamManager()).streams.delete(stream).catch(() => undefined);
    await nc.close();
    await db.drop();
  });

  it('delivers once, acks after the record, redelivers on failure, terminates poison', async () => {
    const jsm = await nc.jetstreamManager();
    const pendingInHandler: number[] = [];
    const fixture = await effectConsumer(db.pool, 'billing', async () => {
      pendingInHandler.push((await jsm.consumers.info(stream, 'billing')).num_ack_pending);
    });
    const results: DeliveryResult[] = [];
    const source = await nc.jetstream().consumers.get(stream, 'billing');
    const binding = await bindNatsJetStream(source, fixture.consumer, {
      onResult: (result) => results.push(result),
    });

    const js = nc.jetstream();
    const publish = async (body: string, id: string) => {
      const h = headers();
      h.set('Nats-Msg-Id', id);
      await js.publish(topic, body, { headers: h });
    };
    const ok = makeEnvelope({ topic });
    const flaky = makeEnvelope({ topic, payload: { failTimes: 1 } });
    await publish('not an envelope', 'poison-1');
    await publish(JSON.stringify(ok), ok.id);
    await publish(JSON.stringify(flaky), flaky.id);

    await eventually(async () => (await fixture.effects()).length === 2);
    await eventually(async () => {
      const info = await jsm.consumers.info(stream, 'billing');
      return info.num_ack_pending === 0 && info.num_pending === 0;
    });
    await binding.stop();

    expect((await fixture.effects()).sort()).toEqual([ok.id, flaky.id].sort());
    expect(fixture.seen.filter((id) => id === flaky.id)).toHaveLength(2);
    // While each handler ran, its message was still unacknowledged.
    expect(pendingInHandler.every((n) => n >= 1)).toBe(true);
    expect(results.map((r) => r.reason).sort()).toEqual([
      'handler-failed',
      'poison',
      'processed',
      'processed',
    ]);
  });
});
