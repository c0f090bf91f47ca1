import { createHash } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parseEnvelope } from '../../../src/publishers/envelope.js';
import {
  chunkEntries,
  SQS_BATCH_LIMIT,
  SqsPublisher,
} from '../../../src/publishers/sqs/sqs-publisher.js';
import type { SqsSendMessageBatchInput } from '../../../src/publishers/sqs/sqs-client.js';
import { makeMessage } from '../../contract/messages.js';
import { closedPort } from '../../helpers/services.js';

/**
 * A local endpoint speaking as much of the SQS AWS JSON 1.0 protocol as SendMessageBatch needs
 * (what @aws-sdk/client-sqs v3 sends: POST /, `X-Amz-Target: AmazonSQS.SendMessageBatch`,
 * `Content-Type: application/x-amz-json-1.0`). Entries whose envelope header `fail` is `sender`
 * or `server` are failed with that fault. It checks the request shape; it is NOT SQS (no FIFO
 * dedup, no ordering), so nothing here claims SQS behaviour.
 */
interface FakeSqs {
  url: string;
  requests: {
    target: string | undefined;
    contentType: string | undefined;
    input: SqsSendMessageBatchInput;
  }[];
  /** Answer every request with this error instead (status, __type). */
  failRequest?: [number, string];
  close(): Promise<void>;
}

async function startFakeSqs(): Promise<FakeSqs> {
  const fake: FakeSqs = { url: '', requests: [], close: async () => undefined };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const input = JSON.parse(Buffer.concat(chunks).toString('utf8')) as SqsSendMessageBatchInput;
      fake.requests.push({
        target: req.headers['x-amz-target'] as string | undefined,
        contentType: req.headers['content-type'],
        input,
      });
      res.setHeader('content-type', 'application/x-amz-json-1.0');
      if (fake.failRequest) {
        const [status, type] = fake.failRequest;
        res
          .writeHead(status)
          .end(JSON.stringify({ __type: `com.amazonaws.sqs#${type}`, message: `${type} (fake)` }));
        return;
      }
      const Successful: object[] = [];
      const Failed: object[] = [];
      for (const entry of input.Entries) {
        const fail = parseEnvelope(entry.MessageBody).headers.fail;
        if (fail) {
          Failed.push({
            Id: entry.Id,
            SenderFault: fail === 'sender',
            Code: fail === 'sender' ? 'InvalidParameterValue' : 'InternalError',
            Message: `failed by the fake (${fail})`,
          });
        } else {
          Successful.push({
            Id: entry.Id,
            MessageId: `sqs-${entry.Id}`,
            // The SDK verifies this checksum of every accepted body.
            MD5OfMessageBody: createHash('md5').update(entry.MessageBody).digest('hex'),
            ...(entry.MessageGroupId && { SequenceNumber: '1' }),
          });
        }
      }
      res.writeHead(200).end(JSON.stringify({ Successful, Failed }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  fake.close = async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return fake;
}

const clientConfig = (endpoint: string) => ({
  region: 'us-east-1',
  endpoint,
  credentials: { accessKeyId: 'AKIDTEST', secretAccessKey: 'test-secret' },
  maxAttempts: 1,
});

describe('SqsPublisher (against a local SQS-protocol endpoint)', () => {
  let sqs: FakeSqs;
  let fifoUrl: string;

  beforeAll(async () => {
    sqs = await startFakeSqs();
    fifoUrl = `${sqs.url}/000000000000/outbox.fifo`;
  });
  afterAll(() => sqs.close());
  beforeEach(() => {
    sqs.requests.length = 0;
    delete sqs.failRequest;
  });

  it('sends SendMessageBatch with the envelope, group id = aggregate, dedup id = message id', async () => {
    const publisher = new SqsPublisher({ queueUrl: fifoUrl, client: clientConfig(sqs.url) });
    const messages = [
      makeMessage({ aggregateId: 'order-1' }),
      makeMessage({ aggregateId: 'order-2' }),
    ];

    expect(await publisher.publish(messages)).toEqual([
      { status: 'published' },
      { status: 'published' },
    ]);
    await publisher.close();

    expect(sqs.requests).toHaveLength(1);
    const [request] = sqs.requests;
    expect(request!.target).toBe('AmazonSQS.SendMessageBatch');
    expect(request!.contentType).toBe('application/x-amz-json-1.0');
    expect(request!.input.QueueUrl).toBe(fifoUrl);
    expect(request!.input.Entries).toEqual(
      messages.map((m, i) => ({
        Id: `m${i}`,
        MessageBody: JSON.stringify({
          id: m.id,
          topic: m.topic,
          aggregateId: m.aggregateId,
          sequence: m.sequence,
          payload: m.payload,
          headers: m.headers,
          createdAt: m.createdAt.toISOString(),
        }),
        MessageGroupId: m.aggregateId,
        MessageDeduplicationId: m.id,
      })),
    );
  });

  it('leaves out the FIFO fields for a standard queue', async () => {
    const publisher = new SqsPublisher({
      queueUrl: `${sqs.url}/000000000000/outbox`,
      client: clientConfig(sqs.url),
    });
    await publisher.publish([makeMessage()]);
    await publisher.close();
    expect(Object.keys(sqs.requests[0]!.input.Entries[0]!)).toEqual(['Id', 'MessageBody']);
  });

  it('sends 25 messages as batches of 10, 10 and 5 and maps per-entry failures in order', async () => {
    const publisher = new SqsPublisher({ queueUrl: fifoUrl, client: clientConfig(sqs.url) });
    const messages = Array.from({ length: 25 }, (_, i) =>
      makeMessage({
        headers: i === 3 ? { fail: 'sender' } : i === 14 ? { fail: 'server' } : {},
      }),
    );

    const outcomes = await publisher.publish(messages);
    await publisher.close();

    expect(sqs.requests.map((r) => r.input.Entries.length).sort()).toEqual([10, 10, 5]);
    expect(outcomes[3]).toEqual({
      status: 'permanent',
      error: 'SQS: InvalidParameterValue: failed by the fake (sender)',
    });
    expect(outcomes[14]).toEqual({
      status: 'retryable',
      error: 'SQS: InternalError: failed by the fake (server)',
    });
    outcomes.forEach((outcome, i) => {
      if (i !== 3 && i !== 14) expect(outcome).toEqual({ status: 'published' });
    });
  });

  it(`never puts more than ${SQS_BATCH_LIMIT} entries in one request: ${2 * SQS_BATCH_LIMIT + 3} messages take 3, each message sent once, outcomes in order`, async () => {
    const publisher = new SqsPublisher({ queueUrl: fifoUrl, client: clientConfig(sqs.url) });
    const count = 2 * SQS_BATCH_LIMIT + 3;
    // Failures on both sides of each request boundary show that outcomes come back in order.
    const failing = new Set([SQS_BATCH_LIMIT - 1, SQS_BATCH_LIMIT, 2 * SQS_BATCH_LIMIT, count - 1]);
    const messages = Array.from({ length: count }, (_, i) =>
      makeMessage({ headers: failing.has(i) ? { fail: 'sender' } : {} }),
    );

    const outcomes = await publisher.publish(messages);
    await publisher.close();

    expect(sqs.requests).toHaveLength(3);
    for (const request of sqs.requests) {
      expect(request.input.Entries.length).toBeLessThanOrEqual(SQS_BATCH_LIMIT);
    }
    const sent = sqs.requests.flatMap((r) =>
      r.input.Entries.map((entry) => parseEnvelope(entry.MessageBody).id),
    );
    expect([...sent].sort()).toEqual(messages.map((m) => m.id).sort());
    expect(outcomes.map((o) => o.status)).toEqual(
      messages.map((_, i) => (failing.has(i) ? 'permanent' : 'published')),
    );
  });

  it('makes a failed request retryable for its messages (a missing queue must not dead-letter)', async () => {
    sqs.failRequest = [400, 'QueueDoesNotExist'];
    const publisher = new SqsPublisher({ queueUrl: fifoUrl, client: clientConfig(sqs.url) });
    const outcomes = await publisher.publish([makeMessage(), makeMessage()]);
    await publisher.close();
    for (const outcome of outcomes) {
      expect(outcome.status).toBe('retryable');
      expect(outcome.status === 'retryable' && outcome.error).toMatch(/QueueDoesNotExist/);
    }
  });

  it('gives retryable when the endpoint is unreachable', async () => {
    const endpoint = `http://127.0.0.1:${await closedPort()}`;
    const publisher = new SqsPublisher({
      queueUrl: `${endpoint}/000000000000/q.fifo`,
      client: clientConfig(endpoint),
    });
    const outcomes = await publisher.publish([makeMessage()]);
    await publisher.close();
    expect(outcomes[0]!.status).toBe('retryable');
    expect(outcomes[0]!.status === 'retryable' && outcomes[0]!.error).toMatch(/ECONNREFUSED/);
  });

  it('sends to the route destination as the queue URL', async () => {
    const publisher = new SqsPublisher({ queueUrl: fifoUrl, client: clientConfig(sqs.url) });
    const other = `${sqs.url}/000000000000/other.fifo`;
    await publisher.publish([makeMessage()], { destination: other });
    await publisher.close();
    expect(sqs.requests[0]!.input.QueueUrl).toBe(other);
  });
});

describe('chunkEntries', () => {
  const entry = (id: number, bytes: number) => ({ Id: `m${id}`, MessageBody: 'x'.repeat(bytes) });

  it('caps a chunk at 10 entries and at maxBytes, but never leaves an entry out', () => {
    const entries = Array.from({ length: 12 }, (_, i) => entry(i, 10));
    expect(chunkEntries(entries, 1_000).map((c) => c.length)).toEqual([10, 2]);
    expect(chunkEntries(entries, 35).map((c) => c.length)).toEqual([3, 3, 3, 3]);
    expect(chunkEntries([entry(0, 500), entry(1, 5)], 100).map((c) => c.length)).toEqual([1, 1]);
    expect(chunkEntries([], 100)).toEqual([]);
  });
});
