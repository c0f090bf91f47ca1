import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import type {
  AmqpConfirmChannelLike,
  AmqpConnectionLike,
} from '../../../src/publishers/rabbitmq/amqp-client.js';
import { RabbitMqPublisher } from '../../../src/publishers/rabbitmq/rabbitmq-publisher.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';

/**
 * A broker that confirms each publish at once unless an alarm is on: then, as RabbitMQ does, it
 * blocks the connection at its next publish (`connection.blocked` comes AFTER that publish was
 * sent) and reads, so confirms, nothing until the alarm clears.
 */
function fakeBroker() {
  const connection = new EventEmitter();
  const channel = new EventEmitter();
  let alarm = false;
  let notified = false;
  const held: (() => void)[] = [];
  const sent: string[] = [];
  const fakeChannel = Object.assign(channel, {
    assertExchange: async () => undefined,
    close: async () => undefined,
    publish(
      _exchange: string,
      _key: string,
      _content: Buffer,
      options: { messageId: string },
      callback: (error: unknown) => void,
    ) {
      sent.push(options.messageId);
      const confirm = () => callback(null);
      if (!alarm) setImmediate(confirm);
      else {
        held.push(confirm);
        if (!notified) {
          notified = true;
          setImmediate(() => connection.emit('blocked', 'low on memory'));
        }
      }
      return true;
    },
  }) as unknown as AmqpConfirmChannelLike;
  const fakeConnection = Object.assign(connection, {
    createConfirmChannel: async () => fakeChannel,
    close: async () => undefined,
  }) as unknown as AmqpConnectionLike;
  return {
    connection: fakeConnection,
    sent,
    /** The alarm goes off: the next publish blocks the connection. */
    alarm() {
      alarm = true;
    },
    /** The alarm clears. */
    clear() {
      alarm = false;
      if (notified) connection.emit('unblocked');
      notified = false;
      for (const confirm of held.splice(0)) confirm();
    },
  };
}

function message(n: number): OutgoingMessage {
  return {
    id: `m${n}`,
    rowId: String(n),
    topic: 'payment.charge',
    aggregateId: `a${n}`,
    sequence: 1,
    payload: {},
    headers: {},
    createdAt: new Date(),
    attempts: 1,
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('RabbitMQ publisher while the broker blocks publishers (connection.blocked, issue 44)', () => {
  it('in flight when the block starts: retryable with a Retry-After once blockedWaitMs has passed', async () => {
    const broker = fakeBroker();
    const publisher = new RabbitMqPublisher({ connection: broker.connection, blockedWaitMs: 50 });
    expect(await publisher.publish([message(0)])).toEqual([{ status: 'published' }]);
    broker.alarm();
    const outcomes = await publisher.publish([message(1), message(2)]);
    // Both were sent before the broker said it blocks; neither was confirmed.
    expect(broker.sent).toEqual(['m0', 'm1', 'm2']);
    for (const outcome of outcomes) {
      expect(outcome).toMatchObject({ status: 'retryable', retryAfterMs: 1_000 });
      expect(outcome.status === 'retryable' && outcome.error).toMatch(
        /blocks publishers \(connection.blocked: low on memory\).*no attempt is charged/,
      );
    }
  });

  it('a publish on a blocked connection sends nothing, waits, and goes out once unblocked', async () => {
    const broker = fakeBroker();
    const publisher = new RabbitMqPublisher({
      connection: broker.connection,
      blockedWaitMs: 60_000,
    });
    broker.alarm();
    // m0 makes the broker block the connection; m1 comes after that.
    const first = publisher.publish([message(0)]);
    await sleep(10);
    const outcomes = publisher.publish([message(1)]);
    await sleep(30);
    expect(broker.sent).toEqual(['m0']);
    broker.clear();
    expect(await first).toEqual([{ status: 'published' }]);
    expect(await outcomes).toEqual([{ status: 'published' }]);
    expect(broker.sent).toEqual(['m0', 'm1']);
  });

  it('a publish on a connection still blocked after blockedWaitMs sends nothing and is given back', async () => {
    const broker = fakeBroker();
    const publisher = new RabbitMqPublisher({ connection: broker.connection, blockedWaitMs: 30 });
    broker.alarm();
    const first = publisher.publish([message(0)]);
    await sleep(10);
    const [outcome] = await publisher.publish([message(1)]);
    expect(outcome).toMatchObject({ status: 'retryable', retryAfterMs: 1_000 });
    expect(await first).toMatchObject([{ status: 'retryable', retryAfterMs: 1_000 }]);
    expect(broker.sent).toEqual(['m0']);
  });

  it('the dispatcher’s abort ends the wait at once', async () => {
    const broker = fakeBroker();
    const publisher = new RabbitMqPublisher({
      connection: broker.connection,
      blockedWaitMs: 60_000,
    });
    broker.alarm();
    const first = publisher.publish([message(0)]);
    await sleep(10);
    const controller = new AbortController();
    const outcomes = publisher.publish([message(1)], { signal: controller.signal });
    controller.abort();
    expect(await outcomes).toEqual([{ status: 'retryable', error: 'publish aborted' }]);
    broker.clear();
    expect(await first).toEqual([{ status: 'published' }]);
  });
});
