import { randomBytes } from 'node:crypto';
import amqp, { type Channel, type ChannelModel } from 'amqplib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertOutboxQueue,
  bindRabbitMq,
  OUTBOX_EXCHANGE,
} from '../../../src/consumer/bindings/rabbitmq.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { requireService } from '../../helpers/services.js';
import { effectConsumer } from '../../fixtures/consumer/effects.js';
import { makeEnvelope } from '../../fixtures/consumer/envelopes.js';
import { eventually } from '../../fixtures/consumer/eventually.js';

const up = await requireService('RabbitMQ', '127.0.0.1', 5672);

describe.skipIf(!up)('RabbitMQ queue consumer binding', () => {
  let db: TestDatabase;
  let connection: ChannelModel;
  let channel: Channel;
  const suffix = randomBytes(4).toString('hex');
  const queue = `consumer-test-${suffix}`;
  const deadExchange = `consumer-test-dead-${suffix}`;
  const deadQueue = `${deadExchange}-q`;
  const topic = `ctest${suffix}.charge`;

  beforeAll(async () => {
    db = await createTestDatabase();
    connection = await amqp.connect('amqp://guest:guest@127.0.0.1:5672');
    channel = await connection.createChannel();
    await channel.assertExchange(deadExchange, 'fanout', { durable: false, autoDelete: false });
    await channel.assertQueue(deadQueue, { durable: false });
    await channel.bindQueue(deadQueue, deadExchange, '');
    await assertOutboxQueue(channel, {
      queue,
      routingKeys: [`ctest${suffix}.*`],
      deadLetterExchange: deadExchange,
    });
  });
  afterAll(async () => {
    await channel.deleteQueue(queue).catch(() => undefined);
    await channel.deleteQueue(deadQueue).catch(() => undefined);
    await channel.deleteExchange(deadExchange).catch(() => undefined);
    await connection.close();
    await db.drop();
  });

  it('delivers once, acks after the record, requeues on failure, dead-letters poison', async () => {
    const fixture = await effectConsumer(db.pool, 'billing');
    const consumerChannel = await connection.createChannel();
    const binding = await bindRabbitMq(consumerChannel, queue, fixture.consumer, { prefetch: 5 });

    const ok = makeEnvelope({ topic });
    const flaky = makeEnvelope({ topic, payload: { failTimes: 2 } });
    channel.publish(OUTBOX_EXCHANGE, topic, Buffer.from('{broken'), { messageId: 'poison-1' });
    for (const envelope of [ok, flaky, ok]) {
      channel.publish(OUTBOX_EXCHANGE, topic, Buffer.from(JSON.stringify(envelope)), {
        messageId: envelope.id,
        persistent: true,
      });
    }

    await eventually(async () => (await fixture.effects()).length === 2);
    await eventually(async () => (await channel.checkQueue(deadQueue)).messageCount === 1);
    await binding.stop();
    // Closing the channel would requeue anything left unacknowledged: nothing comes back.
    await consumerChannel.close();
    expect((await channel.checkQueue(queue)).messageCount).toBe(0);

    expect((await fixture.effects()).sort()).toEqual([ok.id, flaky.id].sort());
    expect(fixture.seen.filter((id) => id === flaky.id)).toHaveLength(3);
    const dead = await channel.get(deadQueue, { noAck: true });
    expect(dead && dead.content.toString()).toBe('{broken');
  });

  it('a consumer that dies before acking gets its message redelivered to the next one', async () => {
    const fixture = await effectConsumer(db.pool, 'billing-crash');
    let block!: () => void;
    const blocked = new Promise<void>((resolve) => (block = resolve));
    let entered!: () => void;
    const inHandler = new Promise<void>((resolve) => (entered = resolve));
    const stuck = await effectConsumer(db.pool, 'billing-crash', async () => {
      entered();
      await blocked;
      throw new Error('process died');
    });
    const doomed = await connection.createChannel();
    await bindRabbitMq(doomed, queue, stuck.consumer);
    const envelope = makeEnvelope({ topic });
    channel.publish(OUTBOX_EXCHANGE, topic, Buffer.from(JSON.stringify(envelope)), {
      messageId: envelope.id,
    });
    await inHandler;
    await doomed.close(); // the consumer's connection is gone mid-handler: no ack was sent
    block();

    const healthy = await connection.createChannel();
    const binding = await bindRabbitMq(healthy, queue, fixture.consumer);
    await eventually(async () => (await fixture.effects()).includes(envelope.id));
    await binding.stop();
    await healthy.close();
    expect((await fixture.effects()).filter((id) => id === envelope.id)).toHaveLength(1);
  });
});
