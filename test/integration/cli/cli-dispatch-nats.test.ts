import { connect, type NatsConnection, type StreamConfig } from 'nats';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { uniqueName } from '../../contract/messages.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';
import { requireService } from '../../helpers/services.js';

/**
 * Issue 17 part 2: `outbox dispatch --publisher nats://… --nats-stream NAME` against streams an
 * operator created beforehand with the NATS client. The dispatcher must publish into them as they
 * are, never change them, and say clearly when a topic falls outside them.
 *
 * The server is shared with other test runs and stream subjects may not overlap across streams,
 * so each test's topics live under their own first token (`orders_<random>.created`): the same
 * shape as the issue's `orders.created`, which the old code widened to `orders.>`.
 */
const NATS_URL = 'nats://127.0.0.1:4222';
const natsUp = await requireService('NATS (JetStream)', '127.0.0.1', 4222);

let db: TestDatabase;
let nc: NatsConnection;
/** Streams this file created (by the operator's hand or through the dispatcher): deleted after. */
const streams: string[] = [];

beforeAll(async () => {
  if (!natsUp) return;
  db = await createTestDatabase();
  nc = await connect({ servers: '127.0.0.1:4222' });
});
afterAll(async () => {
  if (!natsUp) return;
  const jsm = await nc.jetstreamManager();
  for (const name of streams) await jsm.streams.delete(name).catch(() => undefined);
  await nc.close();
  await db.drop();
});
beforeEach(async () => {
  if (natsUp) await resetOutbox(db.pool);
});

/** A stream name for this test, deleted in afterAll whoever creates it. */
function streamName(): string {
  const name = uniqueName('AOTEST_ISSUE17_');
  streams.push(name);
  return name;
}

/** What an operator does: `jsm.streams.add` with the subjects they chose. */
async function operatorCreates(
  subjects: string[],
): Promise<{ name: string; config: StreamConfig }> {
  const name = streamName();
  const jsm = await nc.jetstreamManager();
  const info = await jsm.streams.add({ name, subjects });
  return { name, config: info.config };
}

async function streamConfig(name: string): Promise<StreamConfig> {
  return (await (await nc.jetstreamManager()).streams.info(name)).config;
}

/** Subjects and message ids of everything the stream stored, in order. */
async function stored(name: string): Promise<{ subject: string; id: string | undefined }[]> {
  const jsm = await nc.jetstreamManager();
  const { state } = await jsm.streams.info(name);
  const out = [];
  for (let seq = state.first_seq; seq <= state.last_seq && state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(name, { seq });
    out.push({ subject: m.subject, id: m.header.get('Nats-Msg-Id') });
  }
  return out;
}

const dispatchOnce = (stream: string, ...flags: string[]) =>
  runCli([
    'dispatch',
    '--once',
    '--database-url',
    db.url,
    '--publisher',
    NATS_URL,
    '--nats-stream',
    stream,
    ...flags,
  ]);

async function rows(): Promise<
  { id: string; dispatched: boolean; dead: boolean; attempts: number; lastError: string | null }[]
> {
  const { rows } = await db.pool.query(
    `SELECT message_id::text AS id, dispatched_at IS NOT NULL AS dispatched,
            dead_lettered_at IS NOT NULL AS dead, attempts, last_error AS "lastError"
       FROM outbox_messages o ORDER BY o.id`, // o.id: a bare "id" would sort by the message_id alias (random within a ms)
  );
  return rows;
}

describe.runIf(natsUp)('outbox dispatch --nats-stream on a stream the operator owns', () => {
  it.each([
    ['exactly the topic', (t: string) => [t]],
    ['the topic and everything under it', (t: string) => [`${t}.>`, t]],
  ])(
    'publishes into a stream capturing %s, and leaves its configuration alone',
    async (_, subjectsFor) => {
      const topic = `${uniqueName('orders_')}.created`;
      const { name, config } = await operatorCreates(subjectsFor(topic));
      const enqueued = await enqueueCommitted(db.pool, manyMessages(3, 1, topic));

      const run = await dispatchOnce(name);
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/drained published=3/);
      // Three aggregates are published concurrently: compare as sets.
      const byId = (a: { id?: string }, b: { id?: string }) => (a.id! < b.id! ? -1 : 1);
      expect((await stored(name)).sort(byId)).toEqual(
        enqueued.map((m) => ({ subject: topic, id: m.messageId })).sort(byId),
      );
      expect(await streamConfig(name)).toEqual(config);
      expect((await rows()).every((r) => r.dispatched && r.lastError === null)).toBe(true);
    },
  );

  it('a topic the stream does not capture: a clear last_error, no config change, no hot retry', async () => {
    const orders = uniqueName('orders_');
    const { name, config } = await operatorCreates([`${orders}.created`]);
    await enqueueCommitted(db.pool, [
      { topic: `${orders}.created`, aggregateId: 'a', payload: 1 },
      { topic: `${orders}.cancelled`, aggregateId: 'b', payload: 2 },
    ]);

    const run = await dispatchOnce(name);
    expect(run.code).toBe(1);
    // The startup log names the stream and its subjects; the dead letter names the subject.
    expect(run.stdout).toContain(`NATS stream ${name}`);
    expect(run.stdout).toContain(`${orders}.created`);
    expect(run.stderr).toContain(`${orders}.cancelled`);
    const [captured, uncaptured] = await rows();
    expect(captured).toMatchObject({ dispatched: true, lastError: null });
    // Dead-lettered on the first attempt: nothing retries it until `outbox replay`.
    expect(uncaptured).toMatchObject({ dispatched: false, dead: true, attempts: 1 });
    expect(uncaptured!.lastError).toContain(`subject ${orders}.cancelled`);
    expect(uncaptured!.lastError).toContain(`stream ${name}`);
    expect(uncaptured!.lastError).toMatch(/never changes|outbox replay/);
    expect(await streamConfig(name)).toEqual(config);
    expect((await stored(name)).map((m) => m.subject)).toEqual([`${orders}.created`]);

    // Once the operator adds the subject, a replay publishes it: nothing was lost.
    const jsm = await nc.jetstreamManager();
    await jsm.streams.update(name, { subjects: [`${orders}.created`, `${orders}.cancelled`] });
    expect((await runCli(['replay', '--all-dead', '--database-url', db.url])).code).toBe(0);
    const again = await dispatchOnce(name);
    expect(again.code, again.stderr).toBe(0);
    expect((await stored(name)).map((m) => m.subject)).toEqual([
      `${orders}.created`,
      `${orders}.cancelled`,
    ]);
  });

  it('a missing stream is created with exactly the --nats-subjects given', async () => {
    const orders = uniqueName('orders_');
    const name = streamName();
    await enqueueCommitted(db.pool, manyMessages(2, 1, `${orders}.created`));
    const run = await dispatchOnce(
      name,
      '--nats-subjects',
      `${orders}.created, ${orders}.shipped`,
      '--nats-subjects',
      `${orders}.audit.>`,
    );
    expect(run.code, run.stderr).toBe(0);
    expect((await streamConfig(name)).subjects).toEqual([
      `${orders}.created`,
      `${orders}.shipped`,
      `${orders}.audit.>`,
    ]);
    expect((await stored(name)).map((m) => m.subject)).toEqual([
      `${orders}.created`,
      `${orders}.created`,
    ]);
  });

  it('a missing stream without --nats-subjects gets the default (the topic’s first segment)', async () => {
    const orders = uniqueName('orders_');
    const name = streamName();
    await enqueueCommitted(db.pool, manyMessages(1, 1, `${orders}.created`));
    const run = await dispatchOnce(name);
    expect(run.code, run.stderr).toBe(0);
    expect((await streamConfig(name)).subjects).toEqual([`${orders}.>`]);
  });

  it('--nats-subjects needs --nats-stream and valid subjects; --help documents both', async () => {
    const alone = await runCli([
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      NATS_URL,
      '--nats-subjects',
      'orders.created',
    ]);
    expect(alone.code).toBe(2);
    expect(alone.stderr).toMatch(/--nats-subjects .*--nats-stream/);
    const bad = await dispatchOnce(streamName(), '--nats-subjects', 'orders.>.x');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--nats-subjects/);
    const help = (await runCli(['dispatch', '--help'])).stdout;
    expect(help).toMatch(/--nats-stream NAME/);
    expect(help).toMatch(/--nats-subjects LIST/);
  });
});
