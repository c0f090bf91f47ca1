import { describe, expect, it } from 'vitest';
import { createPublisherFromUrl } from '../../../src/publishers/from-url.js';
import { HttpPublisher } from '../../../src/publishers/http/http-publisher.js';
import { KafkaPublisher } from '../../../src/publishers/kafka/kafka-publisher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { NatsJetStreamPublisher } from '../../../src/publishers/nats/nats-jetstream-publisher.js';
import { importPeer, MissingPeerDependencyError } from '../../../src/publishers/optional-peer.js';
import { RabbitMqPublisher } from '../../../src/publishers/rabbitmq/rabbitmq-publisher.js';
import { RedisStreamsPublisher } from '../../../src/publishers/redis/redis-streams-publisher.js';

describe('createPublisherFromUrl', () => {
  it.each([
    ['http://127.0.0.1:8080/hook', HttpPublisher],
    ['https://hooks.example.com/x', HttpPublisher],
    ['nats://127.0.0.1:4222', NatsJetStreamPublisher],
    ['amqp://guest:guest@127.0.0.1:5672', RabbitMqPublisher],
    ['amqps://host', RabbitMqPublisher],
    ['redis://127.0.0.1:6379', RedisStreamsPublisher],
    ['rediss://host:6380', RedisStreamsPublisher],
    ['kafka://127.0.0.1:9092', KafkaPublisher],
    ['memory://', InMemoryPublisher],
    ['NATS://127.0.0.1:4222', NatsJetStreamPublisher],
  ] as const)('%s → %o', async (url, type) => {
    // Nothing connects until the first publish, so no server is needed here.
    const publisher = await createPublisherFromUrl(url, { natsStream: 'OUTBOX' });
    expect(publisher).toBeInstanceOf(type);
    await publisher.close?.();
  });

  it('names the supported schemes for an unknown one', async () => {
    await expect(createPublisherFromUrl('sqs://queue')).rejects.toThrow(
      /unsupported publisher URL scheme "sqs".*nats:\/\//,
    );
    await expect(createPublisherFromUrl('not a url')).rejects.toThrow(/unsupported/);
  });
});

describe('importPeer', () => {
  it('turns a missing package into an install hint', async () => {
    const name = 'agent-outbox-peer-that-is-not-installed';
    const error = await importPeer(name, 'SomePublisher', () => import(name)).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(MissingPeerDependencyError);
    expect((error as Error).message).toBe(
      `SomePublisher needs the optional peer dependency "${name}": npm install ${name}`,
    );
  });

  it('passes other load errors through', async () => {
    const boom = new Error('syntax error in module');
    await expect(importPeer('x', 'X', () => Promise.reject(boom))).rejects.toBe(boom);
  });
});
