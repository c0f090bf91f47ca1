import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseEnvelope, toEnvelope, type Envelope } from '../../src/publishers/envelope.js';
import type { OutgoingMessage, Publisher } from '../../src/publishers/publisher.js';
import type { Collector, Delivery } from './collector.js';
import { makeMessage, makeMessageOfEnvelopeBytes, uniqueName } from './messages.js';
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js';

/** What a publisher under test claims; the suite checks exactly these claims. */
export interface PublisherCapabilities {
  /** The broker drops a re-publish of the same message id (JetStream, Redis script, SQS FIFO). */
  dedupesById: boolean;
  /** Messages of one aggregate published in sequence are received in that order. */
  ordersPerAggregate: boolean;
  /** The receiver reports the broker-native id (`Delivery.nativeId`). */
  carriesNativeId: boolean;
  /**
   * Most messages the adapter puts in one broker request (SQS `SendMessageBatch`: 10), or
   * undefined when nothing caps a call: the adapter sends each message on its own request (HTTP,
   * NATS, AMQP, Redis) or the broker takes any number. The large-batch tests publish
   * `2 × batchLimit + 3` messages (two full requests and a partial one), or 250 when undefined.
   */
  batchLimit: number | undefined;
  /**
   * Largest envelope (bytes of the JSON body) the broker accepts: above it a message must come
   * back `permanent` (it can never succeed) without failing the rest of its call, and one
   * {@link SIZE_HEADROOM_BYTES} below it must be published. Undefined when there is no limit
   * (in-memory) or it is too large to exercise here (RabbitMQ's 128 MiB, Redis' 512 MiB).
   */
  maxMessageBytes: number | undefined;
  /**
   * Turns a message into one this broker fails (unroutable topic, wrong key type, injected
   * rejection), for the partial-failure test; omit when no such message can be made.
   */
  failingMessage?: (message: OutgoingMessage) => OutgoingMessage | Promise<OutgoingMessage>;
  /** The outcome status the adapter documents for that failing message. */
  failingStatus?: 'retryable' | 'permanent';
}

/** A publisher implementation plus the means to observe its broker. */
export interface PublisherTarget {
  /** Suite title. */
  name: string;
  capabilities: PublisherCapabilities;
  /** Once before the suite (start servers, create streams). */
  setup?(): Promise<void>;
  /** Once after the suite. */
  teardown?(): Promise<void>;
  /** A publisher connected to the broker under test. Closed by the suite. */
  create(): Promise<Publisher> | Publisher;
  /**
   * A publisher pointed at a closed port. Closed by the suite. Omit only when there is no broker
   * to be unreachable (in-memory).
   */
  createUnreachable?(): Promise<Publisher> | Publisher;
  /**
   * Starts receiving what is published on `topics`, as a consumer of the broker would (NOT from
   * the publisher's own bookkeeping), into `collector`. Resolves once subscribed; returns a stop
   * function. `publisher` is the one under test (needed only by the in-memory target).
   */
  receive(
    topics: string[],
    collector: Collector,
    publisher: Publisher,
  ): Promise<() => Promise<void>>;
  /** Makes a collector (see collector.ts). */
  collector(): Collector;
  /**
   * For the dropped-connection test: the broker's port, and a publisher connecting to
   * 127.0.0.1:`proxyPort` (a {@link TcpProxy} in front of the broker) instead. Omit for
   * brokers without a connection (in-memory).
   */
  throughProxy?: {
    brokerPort(): number;
    create(proxyPort: number): Promise<Publisher> | Publisher;
  };
}

/**
 * How far below `maxMessageBytes` a message must still be published. Brokers may count their
 * framing against the limit (NATS counts the `Nats-Msg-Id` header against `max_payload`), so the
 * declared limit is checked to within this much from below, and exactly from above.
 */
export const SIZE_HEADROOM_BYTES = 1024;

function envelopeOf(delivery: Delivery): Envelope {
  return parseEnvelope(delivery.body);
}

function idsOf(deliveries: readonly Delivery[]): string[] {
  return deliveries.map((delivery) => envelopeOf(delivery).id);
}

/** JSON round trip: what a consumer can get back at best. */
function expectedEnvelope(message: OutgoingMessage): Envelope {
  return JSON.parse(JSON.stringify(toEnvelope(message))) as Envelope;
}

/**
 * Registers the shared conformance tests for one publisher (Watermill's `TestPubSub` idea): every
 * adapter, the in-memory one included, must pass the same checks, tuned only by its declared
 * capabilities.
 */
export function describePublisherConformance(target: PublisherTarget): void {
  describe(`${target.name} — publisher conformance`, () => {
    let publisher: Publisher;
    const stops: (() => Promise<void>)[] = [];

    beforeAll(async () => {
      await target.setup?.();
      publisher = await target.create();
    });

    afterAll(async () => {
      for (const stop of stops) await stop();
      await publisher?.close?.();
      await target.teardown?.();
    });

    async function receive(topics: string[]): Promise<Collector> {
      const collector = target.collector();
      stops.push(await target.receive(topics, collector, publisher));
      return collector;
    }

    it('publishes a message whose body is the envelope, with id and headers intact', async () => {
      const topic = `${uniqueName()}.mail.send`;
      const collector = await receive([topic]);
      const message = makeMessage({ topic, sequence: 3 });

      expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);

      await collector.waitFor((d) => d.length >= 1, 'the message');
      const [delivery] = collector.deliveries;
      expect(envelopeOf(delivery!)).toEqual(expectedEnvelope(message));
      if (target.capabilities.carriesNativeId) expect(delivery!.nativeId).toBe(message.id);
    });

    it('returns one outcome per message, in order, and delivers the whole batch', async () => {
      const root = uniqueName();
      const topics = [`${root}.alpha`, `${root}.beta`];
      const collector = await receive(topics);
      const messages = Array.from({ length: 25 }, (_, i) =>
        makeMessage({ topic: topics[i % 2]!, aggregateId: `agg-${i % 7}`, sequence: i + 1 }),
      );

      const outcomes = await publisher.publish(messages);

      expect(outcomes).toEqual(messages.map(() => ({ status: 'published' })));
      await collector.waitFor((d) => d.length >= messages.length, '25 messages');
      expect(new Set(idsOf(collector.deliveries))).toEqual(new Set(messages.map((m) => m.id)));
    });

    const { batchLimit, maxMessageBytes } = target.capabilities;
    const largeBatch = batchLimit === undefined ? 250 : 2 * batchLimit + 3;

    it(`publishes a batch of ${largeBatch} (${batchLimit === undefined ? 'no batch limit declared' : `batch limit ${batchLimit}`}): one outcome each, every message delivered once`, async () => {
      const topic = `${uniqueName()}.bulk`;
      const collector = await receive([topic]);
      const messages = Array.from({ length: largeBatch }, (_, i) =>
        makeMessage({ topic, aggregateId: `bulk-${i}` }),
      );
      // Published after the batch has been acknowledged, on the same topic: once it has arrived,
      // every copy of the batch's messages has too (FIFO per topic) — no sleeping needed.
      const sentinel = makeMessage({ topic });

      expect(await publisher.publish(messages)).toEqual(
        messages.map(() => ({ status: 'published' })),
      );
      expect(await publisher.publish([sentinel])).toEqual([{ status: 'published' }]);

      await collector.waitFor((d) => idsOf(d).includes(sentinel.id), 'the sentinel');
      const copies = new Map<string, number>();
      for (const id of idsOf(collector.deliveries)) copies.set(id, (copies.get(id) ?? 0) + 1);
      expect({
        missing: messages.filter((m) => !copies.has(m.id)).map((m) => m.id),
        duplicated: messages.filter((m) => (copies.get(m.id) ?? 0) > 1).map((m) => m.id),
      }).toEqual({ missing: [], duplicated: [] });
    });

    it.runIf(target.capabilities.failingMessage !== undefined)(
      `keeps outcomes in message order across a batch of ${largeBatch} with failures at request boundaries`,
      async () => {
        const topic = `${uniqueName()}.bulkpartial`;
        const collector = await receive([topic]);
        // First and last message, and both sides of the first request boundary.
        const boundary = batchLimit ?? 100;
        const failing = new Set([0, boundary - 1, boundary, largeBatch - 1]);
        const messages = await Promise.all(
          Array.from({ length: largeBatch }, (_, i) => {
            const message = makeMessage({ topic, aggregateId: `bulk-${i}` });
            return failing.has(i) ? target.capabilities.failingMessage!(message) : message;
          }),
        );
        const good = messages.filter((_, i) => !failing.has(i)).map((m) => m.id);

        const outcomes = await publisher.publish(messages);

        expect(outcomes.map((o) => o.status)).toEqual(
          messages.map((_, i) =>
            failing.has(i) ? (target.capabilities.failingStatus ?? 'permanent') : 'published',
          ),
        );
        await collector.waitFor((d) => {
          const received = new Set(idsOf(d));
          return good.every((id) => received.has(id));
        }, `the ${good.length} good messages`);
        const bad = messages.filter((_, i) => failing.has(i)).map((m) => m.id);
        expect(idsOf(collector.deliveries).filter((id) => bad.includes(id))).toEqual([]);
      },
    );

    it.runIf(maxMessageBytes !== undefined)(
      `gives a message above the size limit (${maxMessageBytes} bytes) its own permanent outcome and publishes its neighbours`,
      async () => {
        const topic = `${uniqueName()}.oversize`;
        const collector = await receive([topic]);
        const before = makeMessage({ topic });
        const big = makeMessageOfEnvelopeBytes(maxMessageBytes! + 1, { topic });
        const after = makeMessage({ topic });

        const outcomes = await publisher.publish([before, big, after]);

        expect(outcomes[0]).toEqual({ status: 'published' });
        expect(outcomes[1]!.status).toBe('permanent');
        expect(outcomes[1]!.status === 'permanent' && outcomes[1]!.error.length).toBeGreaterThan(0);
        expect(outcomes[2]).toEqual({ status: 'published' });
        await collector.waitFor(
          (d) => idsOf(d).includes(before.id) && idsOf(d).includes(after.id),
          'the two normal messages',
        );
        expect(idsOf(collector.deliveries)).not.toContain(big.id);
      },
    );

    it.runIf(maxMessageBytes !== undefined)(
      `publishes a message ${SIZE_HEADROOM_BYTES} bytes below the size limit, intact`,
      async () => {
        const topic = `${uniqueName()}.nearlimit`;
        const collector = await receive([topic]);
        const message = makeMessageOfEnvelopeBytes(maxMessageBytes! - SIZE_HEADROOM_BYTES, {
          topic,
        });

        expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);

        await collector.waitFor((d) => d.length >= 1, 'the large message');
        expect(envelopeOf(collector.deliveries[0]!)).toEqual(expectedEnvelope(message));
      },
    );

    it('returns an empty result for an empty batch', async () => {
      expect(await publisher.publish([])).toEqual([]);
    });

    it.runIf(target.capabilities.failingMessage !== undefined)(
      'reports a failing message in its own outcome and still publishes the others',
      async () => {
        const topic = `${uniqueName()}.partial`;
        const collector = await receive([topic]);
        const good1 = makeMessage({ topic });
        const bad = await target.capabilities.failingMessage!(makeMessage({ topic }));
        const good2 = makeMessage({ topic });

        const outcomes = await publisher.publish([good1, bad, good2]);

        expect(outcomes[0]).toEqual({ status: 'published' });
        expect(outcomes[1]!.status).toBe(target.capabilities.failingStatus ?? 'permanent');
        expect(outcomes[2]).toEqual({ status: 'published' });
        await collector.waitFor((d) => d.length >= 2, 'the two good messages');
        expect(idsOf(collector.deliveries)).not.toContain(bad.id);
      },
    );

    it.runIf(target.capabilities.ordersPerAggregate)(
      'delivers one aggregate’s messages in publish order',
      async () => {
        const topic = `${uniqueName()}.ordered`;
        const collector = await receive([topic]);
        const messages = Array.from({ length: 12 }, (_, i) =>
          makeMessage({ topic, aggregateId: 'order-42', sequence: i + 1 }),
        );
        // One call per message, as the dispatcher does for an ordered aggregate.
        for (const message of messages) {
          expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);
        }
        await collector.waitFor((d) => d.length >= messages.length, '12 messages');
        expect(collector.deliveries.map((d) => envelopeOf(d).sequence)).toEqual(
          messages.map((m) => m.sequence),
        );
      },
    );

    it(
      target.capabilities.dedupesById
        ? 'does not deliver a re-published message id twice'
        : 're-delivers a re-published message with the same id and body',
      async () => {
        const topic = `${uniqueName()}.dedup`;
        const collector = await receive([topic]);
        const message = makeMessage({ topic });
        const republished = { ...message, attempts: 2 };
        // Published after the duplicate on the same topic: once it has arrived, a second copy
        // of the duplicate would have arrived before it (FIFO per topic) — no sleeping needed.
        const sentinel = makeMessage({ topic });

        expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);
        expect(await publisher.publish([republished])).toEqual([{ status: 'published' }]);
        expect(await publisher.publish([sentinel])).toEqual([{ status: 'published' }]);

        await collector.waitFor((d) => idsOf(d).includes(sentinel.id), 'the sentinel');
        const copies = collector.deliveries.filter((d) => envelopeOf(d).id === message.id);
        if (target.capabilities.dedupesById) {
          expect(copies).toHaveLength(1);
        } else {
          expect(copies).toHaveLength(2);
          expect(copies[1]!.body).toBe(copies[0]!.body);
        }
      },
    );

    it.runIf(target.throughProxy !== undefined)(
      'gives retryable, never published, while the broker is gone, and recovers when it is back',
      async () => {
        const proxy: TcpProxy = await startTcpProxy(target.throughProxy!.brokerPort());
        const viaProxy = await target.throughProxy!.create(proxy.port);
        try {
          const topic = `${uniqueName()}.outage`;
          const collector = await receive([topic]);
          const before = makeMessage({ topic });
          expect(await viaProxy.publish([before])).toEqual([{ status: 'published' }]);

          await proxy.stop();
          const during = [makeMessage({ topic }), makeMessage({ topic })];
          const outcomes = await viaProxy.publish(during);
          expect(outcomes.map((o) => o.status)).toEqual(['retryable', 'retryable']);

          await proxy.start();
          // Clients reconnect on their own schedule: retry like the dispatcher would.
          const after = makeMessage({ topic });
          let outcome = (await viaProxy.publish([after]))[0]!;
          for (let i = 0; i < 60 && outcome.status !== 'published'; i++) {
            await new Promise((resolve) => setTimeout(resolve, 250));
            outcome = (await viaProxy.publish([after]))[0]!;
          }
          expect(outcome).toEqual({ status: 'published' });
          await collector.waitFor(
            (d) => idsOf(d).includes(before.id) && idsOf(d).includes(after.id),
            'the messages before and after the outage',
          );
        } finally {
          await viaProxy.close?.();
          await proxy.stop();
        }
      },
    );

    it.runIf(target.createUnreachable !== undefined)(
      'gives retryable outcomes, not a throw, when the broker is unreachable',
      async () => {
        const unreachable = await target.createUnreachable!();
        try {
          const messages = [makeMessage(), makeMessage({ topic: 'other.topic' })];
          const outcomes = await unreachable.publish(messages);
          expect(outcomes).toHaveLength(2);
          for (const outcome of outcomes) {
            expect(outcome.status).toBe('retryable');
            expect(outcome.status === 'retryable' && outcome.error.length).toBeGreaterThan(0);
          }
        } finally {
          await unreachable.close?.();
        }
      },
    );
  });
}
