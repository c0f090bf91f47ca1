import { SendMessageBatchCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Producer } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import type { KafkaProducerLike } from '../../../src/publishers/kafka/kafka-client.js';
import type { SqsClientLike, SqsModuleLike } from '../../../src/publishers/sqs/sqs-client.js';

// The adapters type their SDKs structurally (no SDK import in src). These assignments make
// `tsc --noEmit` fail if an SDK release stops fitting the subset we call. NATS, amqplib and
// ioredis are covered the same way by the integration tests, which pass real clients.
describe('structural SDK types', () => {
  it('accept the real SQS client and command, and a kafkajs producer', () => {
    const client: SqsClientLike = new SQSClient({ region: 'us-east-1' });
    const sdk: SqsModuleLike = { SQSClient, SendMessageBatchCommand };
    const producer = (p: Producer): KafkaProducerLike => p;
    expect(typeof client.send).toBe('function');
    expect(typeof sdk.SendMessageBatchCommand).toBe('function');
    expect(typeof producer).toBe('function');
    client.destroy();
  });
});
