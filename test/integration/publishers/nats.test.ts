import { connect, type NatsConnection } from 'nats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectOptions,
  NatsJetStreamPublisher,
} from '../../../src/publishers/nats/nats-jetstream-publisher.js';
import { CREATED_BY_DISPATCHER } from '../../../src/publishers/nats/jetstream-stream.js';
import { createCollector } from '../../contract/collector.js';
import { makeMessage, makeMessageOfEnvelopeBytes, uniqueName } from '../../contract/messages.js';
import { describePublisherConformance } from '../../contract/publisher-conformance.js';
import { closedPort, requireService } from '../../helpers/services.js';

const NATS_URL = 'nats://127.0.0.1:4222';
const natsUp = await requireService('NATS (JetStream)', '127.0.0.1', 4222);
/** What the server announces as `max_payload` in its INFO (1 MiB, the default, if not up). */
const natsMaxPayload = natsUp ? await readMaxPayload() : 1024 * 1024;

async function readMaxPayload(): Promise<number> {
  const probe = await connect({ servers: '127.0.0.1:4222' });
  try {
    return probe.info?.max_payload ?? 1024 * 1024;
  } finally {
    await probe.close();
  }
}

// Every run gets its own stream and subject prefix: the server is shared with other test runs.
const prefix = `${uniqueName('aot')}.`;
const stream = uniqueName('AOTEST_');
let nc: NatsConnection;

async function openTestConnection(): Promise<void> {
  nc = await connect({ servers: '127.0.0.1:4222' });
}

describe.runIf(natsUp)('NATS JetStream', () => {
  describePublisherConformance({
    name: 'NatsJetStreamPublisher (real nats-server)',
    capabilities: {
      dedupesById: true,
      ordersPerAggregate: true,
      carriesNativeId: true,
      // One PubAck-awaited publish per message: nothing caps a call.
      batchLimit: undefined,
      // The client refuses a message above the server's max_payload (headers included) before
      // sending it (MAX_PAYLOAD_EXCEEDED), which the adapter maps to permanent.
      maxMessageBytes: natsMaxPayload,
      // Above max_payload: refused, whatever the stream.
      failingStatus: 'permanent',
      failingMessage: (message) =>
        makeMessageOfEnvelopeBytes(natsMaxPayload + 1, { ...message, payload: '' }),
    },
    async setup() {
      await openTestConnection();
      const jsm = await nc.jetstreamManager();
      await jsm.streams.add({ name: stream, subjects: [`${prefix}>`] });
    },
    async teardown() {
      const jsm = await nc.jetstreamManager();
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
    },
    create: () => new NatsJetStreamPublisher({ connection: NATS_URL, subjectPrefix: prefix }),
    createUnreachable: async () =>
      new NatsJetStreamPublisher({ connection: `nats://127.0.0.1:${await closedPort()}` }),
    collector: createCollector,
    throughProxy: {
      brokerPort: () => 4222,
      create: (port) =>
        new NatsJetStreamPublisher({
          connection: `nats://127.0.0.1:${port}`,
          subjectPrefix: prefix,
          ackTimeoutMs: 2000,
        }),
    },
    async receive(topics, collector) {
      // Read back what the STREAM stored (a core subscription would also see the duplicates
      // JetStream dropped). Polls by sequence: the nats-server here (2.9) predates the
      // consumer API that nats.js' consume() needs.
      const jsm = await nc.jetstreamManager();
      const subjects = new Set(topics.map((topic) => prefix + topic));
      let next = (await jsm.streams.info(stream)).state.last_seq + 1;
      let running = true;
      const loop = (async () => {
        while (running) {
          const last = (await jsm.streams.info(stream)).state.last_seq;
          for (; next <= last; next++) {
            const m = await jsm.streams.getMessage(stream, { seq: next });
            if (subjects.has(m.subject)) {
              collector.push({ body: m.string(), nativeId: m.header.get('Nats-Msg-Id') });
            }
          }
          await new Promise((resolve) => setTimeout(resolve, 25));
        }
      })();
      return async () => {
        running = false;
        await loop;
      };
    },
  });

  describe('NatsJetStreamPublisher', () => {
    beforeAll(openTestConnection);
    afterAll(() => nc.close());

    it('creates the stream when asked, and publishes to prefix + topic', async () => {
      const name = uniqueName('AOTEST_');
      const ownPrefix = `${uniqueName('aot')}.`;
      const publisher = new NatsJetStreamPublisher({
        connection: NATS_URL,
        subjectPrefix: ownPrefix,
        stream: { name },
      });
      const jsm = await nc.jetstreamManager();
      try {
        const message = makeMessage({ topic: 'mail.send' });
        expect(await publisher.publish([message])).toEqual([{ status: 'published' }]);

        const info = await jsm.streams.info(name);
        expect(info.config.subjects).toEqual([`${ownPrefix}>`]);
        expect(info.state.messages).toBe(1);
        const stored = await jsm.streams.getMessage(name, { seq: 1 });
        expect(stored.subject).toBe(`${ownPrefix}mail.send`);
        expect(stored.header.get('Nats-Msg-Id')).toBe(message.id);
      } finally {
        await publisher.close();
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });

    it('leaves an existing stream’s configuration alone', async () => {
      const name = uniqueName('AOTEST_');
      const ownPrefix = `${uniqueName('aot')}.`;
      const jsm = await nc.jetstreamManager();
      await jsm.streams.add({ name, subjects: [`${ownPrefix}only.>`] });
      const publisher = new NatsJetStreamPublisher({
        connection: NATS_URL,
        subjectPrefix: ownPrefix,
        stream: { name, subjects: [`${ownPrefix}>`] },
      });
      try {
        const outcomes = await publisher.publish([
          makeMessage({ topic: 'only.this' }),
          makeMessage({ topic: 'not.captured' }),
        ]);
        expect(outcomes[0]).toEqual({ status: 'published' });
        expect(outcomes[1]).toMatchObject({
          status: 'permanent',
          error: expect.stringContaining(
            `stream ${name} does not capture subject ${ownPrefix}not.captured`,
          ),
        });
        expect((await jsm.streams.info(name)).config.subjects).toEqual([`${ownPrefix}only.>`]);
      } finally {
        await publisher.close();
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });

    // Issue 17: with no prefix and no subjects the publisher used to widen `orders.created` to
    // `orders.>` and add it to the operator's stream, which NATS refuses ("overlaps").
    it.each([
      ['exactly the topic', (t: string) => [t]],
      ['the topic and everything under it', (t: string) => [`${t}.>`, t]],
      ['a wildcard', (t: string) => [t.replace(/\.created$/, '.*')]],
    ])('publishes into an operator’s stream capturing %s, unchanged', async (_, subjectsFor) => {
      const name = uniqueName('AOTEST_');
      const topic = `${uniqueName('orders_')}.created`;
      const jsm = await nc.jetstreamManager();
      const { config } = await jsm.streams.add({ name, subjects: subjectsFor(topic) });
      const publisher = new NatsJetStreamPublisher({ connection: NATS_URL, stream: { name } });
      try {
        expect(await publisher.publish([makeMessage({ topic })])).toEqual([
          { status: 'published' },
        ]);
        expect(await publisher.inspectStream()).toEqual({
          name,
          exists: true,
          createdByDispatcher: false,
          subjects: subjectsFor(topic),
          growsWithTopics: false,
        });
        const info = await jsm.streams.info(name);
        expect(info.config).toEqual(config);
        expect(info.state.messages).toBe(1);
      } finally {
        await publisher.close();
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });

    it('a subject outside an operator’s stream: permanent, reported once, fixed by the operator', async () => {
      const name = uniqueName('AOTEST_');
      const orders = uniqueName('orders_');
      const jsm = await nc.jetstreamManager();
      const { config } = await jsm.streams.add({ name, subjects: [`${orders}.created`] });
      const reported: string[] = [];
      const publisher = new NatsJetStreamPublisher({
        connection: NATS_URL,
        stream: { name, onUncoveredSubject: ({ subject }) => reported.push(subject) },
      });
      try {
        for (let i = 0; i < 2; i++) {
          const outcomes = await publisher.publish([
            makeMessage({ topic: `${orders}.created` }),
            makeMessage({ topic: `${orders}.created.eu` }),
          ]);
          expect(outcomes[0]).toEqual({ status: 'published' });
          expect(outcomes[1]).toMatchObject({ status: 'permanent' });
          const error = outcomes[1]!.status === 'permanent' ? outcomes[1]!.error : '';
          expect(error).toContain(`subject ${orders}.created.eu`);
          expect(error).toContain(`its subjects: ${orders}.created`);
          expect(error).toContain(`outbox replay --all-dead --topic ${orders}.created.eu`);
        }
        expect(reported).toEqual([`${orders}.created.eu`]);
        expect((await jsm.streams.info(name)).config).toEqual(config);

        // The operator adds the subject: the very next publish sees it (no stale cache).
        await jsm.streams.update(name, { subjects: [`${orders}.created`, `${orders}.created.>`] });
        expect(await publisher.publish([makeMessage({ topic: `${orders}.created.eu` })])).toEqual([
          { status: 'published' },
        ]);
      } finally {
        await publisher.close();
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });

    it('inspectStream reads a missing stream without creating it', async () => {
      const name = uniqueName('AOTEST_');
      const orders = uniqueName('orders_');
      const publisher = new NatsJetStreamPublisher({
        connection: NATS_URL,
        stream: { name, subjects: [`${orders}.created`] },
      });
      const jsm = await nc.jetstreamManager();
      try {
        expect(await publisher.inspectStream()).toEqual({
          name,
          exists: false,
          createdByDispatcher: false,
          subjects: [`${orders}.created`],
          growsWithTopics: false,
        });
        await expect(jsm.streams.info(name)).rejects.toThrow();
        expect(
          await new NatsJetStreamPublisher({ connection: NATS_URL }).inspectStream(),
        ).toBeUndefined();
      } finally {
        await publisher.close();
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });

    it('without a prefix, grows the stream with the topics instead of capturing ">"', async () => {
      const name = uniqueName('AOTEST_');
      const a = uniqueName('aot');
      const b = uniqueName('aot');
      const publisher = new NatsJetStreamPublisher({ connection: NATS_URL, stream: { name } });
      const jsm = await nc.jetstreamManager();
      try {
        expect(
          await publisher.publish([
            makeMessage({ topic: `${a}.x` }),
            makeMessage({ topic: `${a}.y.z` }),
          ]),
        ).toEqual([{ status: 'published' }, { status: 'published' }]);
        expect(await publisher.publish([makeMessage({ topic: b })])).toEqual([
          { status: 'published' },
        ]);
        const grown = (await jsm.streams.info(name)).config;
        expect(grown.subjects).toEqual([`${a}.>`, b]);
        // The marker that lets a later publisher (or this one after a restart) grow it too.
        expect(grown.description).toBe(CREATED_BY_DISPATCHER);

        // Someone deletes the stream: one retryable publish, then it is created again.
        await jsm.streams.delete(name);
        const [lost] = await publisher.publish([makeMessage({ topic: `${a}.x` })]);
        expect(lost!.status).toBe('retryable');
        expect(await publisher.publish([makeMessage({ topic: `${a}.x` })])).toEqual([
          { status: 'published' },
        ]);
        const info = await jsm.streams.info(name);
        expect(info.config.subjects).toEqual([`${a}.>`]);
        expect(info.state.messages).toBe(1);
      } finally {
        await publisher.close();
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });

    it('gives retryable when no stream captures the subject', async () => {
      const publisher = new NatsJetStreamPublisher({
        connection: NATS_URL,
        subjectPrefix: `${uniqueName('none')}.`,
      });
      try {
        const [outcome] = await publisher.publish([makeMessage()]);
        expect(outcome!.status).toBe('retryable');
        expect(outcome!.status === 'retryable' && outcome!.error).toMatch(
          /no JetStream stream captures subject/,
        );
      } finally {
        await publisher.close();
      }
    });

    it('uses a connection it is given and leaves it open on close()', async () => {
      const name = uniqueName('AOTEST_');
      const ownPrefix = `${uniqueName('aot')}.`;
      const jsm = await nc.jetstreamManager();
      await jsm.streams.add({ name, subjects: [`${ownPrefix}>`] });
      const publisher = new NatsJetStreamPublisher({ connection: nc, subjectPrefix: ownPrefix });
      try {
        expect(
          await publisher.publish([makeMessage()], { destination: `${ownPrefix}routed` }),
        ).toEqual([{ status: 'published' }]);
        await publisher.close();
        expect(nc.isClosed()).toBe(false);
        expect((await jsm.streams.getMessage(name, { seq: 1 })).subject).toBe(`${ownPrefix}routed`);
      } finally {
        await jsm.streams.delete(name).catch(() => undefined);
      }
    });
  });
});

describe('NATS connectOptions', () => {
  it('moves credentials out of the URL', () => {
    expect(connectOptions('nats://user:p%40ss@nats.example:4333')).toEqual({
      servers: 'nats.example:4333',
      name: 'agent-outbox',
      user: 'user',
      pass: 'p@ss',
    });
    expect(connectOptions('nats://tok3n@127.0.0.1')).toMatchObject({
      servers: '127.0.0.1:4222',
      token: 'tok3n',
    });
  });
});
