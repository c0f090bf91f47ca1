import { describe, expect, it } from 'vitest';
import type { NatsConnectionLike } from '../../../src/publishers/nats/nats-client.js';
import { NatsJetStreamPublisher } from '../../../src/publishers/nats/nats-jetstream-publisher.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';

/** A connection whose PubAcks never come, and whose status events the test pushes. */
function silentConnection() {
  const waiting: ((event: { type: string; data?: unknown }) => void)[] = [];
  const queued: { type: string; data?: unknown }[] = [];
  let sent = 0;
  let stopped = false;
  const connection: NatsConnectionLike = {
    jetstream: () => ({
      publish: () => {
        sent++;
        return new Promise(() => undefined);
      },
    }),
    jetstreamManager: () => Promise.reject(new Error('not used')),
    isClosed: () => false,
    close: async () => undefined,
    status: () =>
      Object.assign(
        {
          async *[Symbol.asyncIterator]() {
            for (;;)
              yield (
                queued.shift() ??
                (await new Promise<{ type: string; data?: unknown }>((resolve) =>
                  waiting.push(resolve),
                ))
              );
          },
        },
        { stop: () => void (stopped = true) },
      ),
  };
  return {
    connection,
    sent: () => sent,
    stopped: () => stopped,
    push(event: { type: string; data?: unknown }) {
      const next = waiting.shift();
      if (next) next(event);
      else queued.push(event);
    },
  };
}

function message(n: number): OutgoingMessage {
  return {
    id: `00000000-0000-4000-8000-00000000000${n}`,
    rowId: String(n),
    topic: 'payment.charge',
    aggregateId: 'a',
    sequence: n,
    payload: {},
    headers: {},
    createdAt: new Date(),
    attempts: 1,
  };
}

describe('NATS publisher: the server goes away before the PubAck (issue 44)', () => {
  it('answers retryable with a Retry-After at the disconnect, not after the ack timeout', async () => {
    const fake = silentConnection();
    const publisher = new NatsJetStreamPublisher({
      connection: fake.connection,
      ackTimeoutMs: 60_000,
      loadModule: () => Promise.reject(new Error('no module')),
    });
    const outcomes = publisher.publish([message(1), message(2)]);
    while (fake.sent() < 2) await new Promise((resolve) => setTimeout(resolve, 1));
    fake.push({ type: 'reconnecting' });
    fake.push({ type: 'disconnect', data: '127.0.0.1:4301' });
    const result = await outcomes;
    expect(result).toHaveLength(2);
    for (const outcome of result) {
      expect(outcome).toMatchObject({ status: 'retryable', retryAfterMs: 1_000 });
      expect(outcome.status === 'retryable' && outcome.error).toMatch(
        /connection to 127\.0\.0\.1:4301 lost before the PubAck.*duplicate window/,
      );
    }
  });

  it('stops following the status of a connection it was given when closed (leaves it open)', async () => {
    const fake = silentConnection();
    const publisher = new NatsJetStreamPublisher({
      connection: fake.connection,
      loadModule: () => Promise.reject(new Error('no module')),
    });
    void publisher.publish([message(1)]);
    while (fake.sent() < 1) await new Promise((resolve) => setTimeout(resolve, 1));
    await publisher.close();
    expect(fake.stopped()).toBe(true);
  });

  it('after a disconnect, sends again (same Nats-Msg-Id) each second until the PubAck comes, within ackTimeoutMs', async () => {
    let status: ((event: { type: string; data?: unknown }) => void) | undefined;
    const sends: { msgID?: string; timeout?: number }[] = [];
    const connection: NatsConnectionLike = {
      jetstream: () => ({
        publish: (_subject, _payload, options) => {
          sends.push({ msgID: options?.msgID, timeout: options?.timeout });
          // A stream electing its leader: the first two copies get no answer.
          return sends.length <= 2
            ? Promise.reject(Object.assign(new Error('timeout'), { code: 'TIMEOUT' }))
            : Promise.resolve({ stream: 'S', seq: 1, duplicate: false });
        },
      }),
      jetstreamManager: () => Promise.reject(new Error('not used')),
      isClosed: () => false,
      close: async () => undefined,
      status: () => ({
        async *[Symbol.asyncIterator]() {
          yield await new Promise<{ type: string; data?: unknown }>(
            (resolve) => (status = resolve),
          );
        },
      }),
    };
    const publisher = new NatsJetStreamPublisher({
      connection,
      ackTimeoutMs: 5_000,
      loadModule: () => Promise.reject(new Error('no module')),
    });
    // Before any disconnect a timeout is final.
    expect(await publisher.publish([message(1)])).toMatchObject([{ status: 'retryable' }]);
    expect(sends).toEqual([{ msgID: message(1).id, timeout: 5_000 }]);
    status!({ type: 'disconnect', data: 'h:1' });
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(await publisher.publish([message(2)])).toEqual([{ status: 'published' }]);
    expect(sends.slice(1).map((s) => s.msgID)).toEqual([message(2).id, message(2).id]);
    expect(sends.slice(1).every((s) => s.timeout! <= 1_000)).toBe(true);
  });
});
