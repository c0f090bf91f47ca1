import { describe, expect, it } from 'vitest';
import { KafkaPublisher, brokerList } from '../../../src/publishers/kafka/kafka-publisher.js';
import { classifyKafkaError, toKafkaMessage } from '../../../src/publishers/kafka/kafka-mapping.js';
import type { KafkaProducerLike } from '../../../src/publishers/kafka/kafka-client.js';
import { makeMessage } from '../../contract/messages.js';
import { closedPort } from '../../helpers/services.js';

// No Kafka broker runs here: these tests cover the record mapping, error classification, the
// call splitting (with a recording producer) and a real kafkajs client failing to connect.

describe('toKafkaMessage', () => {
  it('keys by aggregate id and carries the envelope, headers and message id', () => {
    const message = makeMessage({ aggregateId: 'order-42' });
    const record = toKafkaMessage(message);
    expect(record.key).toBe('order-42');
    expect(JSON.parse(record.value)).toEqual(
      JSON.parse(
        JSON.stringify({
          id: message.id,
          topic: message.topic,
          aggregateId: message.aggregateId,
          sequence: message.sequence,
          payload: message.payload,
          headers: message.headers,
          createdAt: message.createdAt.toISOString(),
        }),
      ),
    );
    expect(record.headers).toEqual({ ...message.headers, 'message-id': message.id });
    expect(record.timestamp).toBe(String(message.createdAt.getTime()));
  });
});

describe('classifyKafkaError', () => {
  it('makes record-level rejections permanent, looking through causes', () => {
    const tooLarge = Object.assign(
      new Error('The request included a message larger than the max'),
      {
        type: 'MESSAGE_TOO_LARGE',
      },
    );
    expect(classifyKafkaError(tooLarge).status).toBe('permanent');
    const wrapped = Object.assign(new Error('retries exhausted'), { cause: tooLarge });
    expect(classifyKafkaError(wrapped).status).toBe('permanent');
  });

  it('makes everything else retryable', () => {
    const leader = Object.assign(new Error('no leader'), { type: 'LEADER_NOT_AVAILABLE' });
    expect(classifyKafkaError(leader).status).toBe('retryable');
    expect(classifyKafkaError(new Error('Connection timeout')).status).toBe('retryable');
    expect(classifyKafkaError('weird').status).toBe('retryable');
  });
});

describe('brokerList', () => {
  it('parses kafka:// URLs and lists', () => {
    expect(brokerList('kafka://h1:9092, h2:9093/')).toEqual(['h1:9092', 'h2:9093']);
    expect(brokerList(['a:1'])).toEqual(['a:1']);
  });
});

describe('KafkaPublisher', () => {
  it('sends one acks=-1 request per Kafka topic and maps a failed send to its messages', async () => {
    const sends: { topic: string; keys: string[]; acks: number }[] = [];
    const producer: KafkaProducerLike = {
      connect: async () => undefined,
      disconnect: async () => undefined,
      send: async (record) => {
        sends.push({
          topic: record.topic,
          keys: record.messages.map((m) => m.key),
          acks: record.acks,
        });
        if (record.topic === 'p.bad') {
          throw Object.assign(new Error('too large'), { type: 'MESSAGE_TOO_LARGE' });
        }
        return [];
      },
    };
    const publisher = new KafkaPublisher({ connection: producer, topicPrefix: 'p.' });
    const messages = [
      makeMessage({ topic: 'good', aggregateId: 'a' }),
      makeMessage({ topic: 'bad', aggregateId: 'b' }),
      makeMessage({ topic: 'good', aggregateId: 'c' }),
    ];

    const outcomes = await publisher.publish(messages);

    expect(sends).toEqual([
      { topic: 'p.good', keys: ['a', 'c'], acks: -1 },
      { topic: 'p.bad', keys: ['b'], acks: -1 },
    ]);
    expect(outcomes.map((o) => o.status)).toEqual(['published', 'permanent', 'published']);
  });

  it('gives retryable outcomes when no broker answers (real kafkajs client)', async () => {
    const publisher = new KafkaPublisher({
      connection: [`127.0.0.1:${await closedPort()}`],
      connectionTimeoutMs: 1000,
    });
    const outcomes = await publisher.publish([makeMessage(), makeMessage()]);
    await publisher.close();
    expect(outcomes.map((o) => o.status)).toEqual(['retryable', 'retryable']);
    expect(outcomes[0]!.status === 'retryable' && outcomes[0]!.error).toMatch(
      /Kafka: .*ECONNREFUSED|Connection/,
    );
  });
});
