import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setDatabaseEngine } from '../../../src/admin/database-engine.js';
import { OutboxValidationError } from '../../../src/core/errors.js';
import { PgOutboxStore } from '../../../src/dispatcher/pg-outbox-store.js';
import {
  createDispatcher,
  createOutbox,
  fromPg,
  migrate,
  type OutboxMessage,
} from '../../../src/index.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * `createDispatcher()` follows the engine its schema records (migration 036), so that the same
 * code — `createOutbox()` and `createDispatcher()`, as the README writes them — publishes on
 * either engine; `engine` chooses one outright.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(() => db?.drop());

/** A schema of its own, migrated, recording `engine`. */
async function schemaOf(schema: string, engine: 'claims' | 'lanes') {
  const client = await db.pool.connect();
  try {
    await migrate(fromPg(client), { schema, engine });
  } finally {
    client.release();
  }
  return schema;
}

const write = (schema: string, messages: readonly OutboxMessage[]) =>
  inTransaction(db.pool, (c) => createOutbox({ schema }).enqueue(fromPg(c), messages));
const count = async (sql: string) =>
  Number((await db.pool.query<{ n: string }>(`SELECT (${sql}) AS n`)).rows[0]!.n);
const messages = (n: number, topic = 'payment.charge') =>
  Array.from({ length: n }, (_, i) => ({ topic, aggregateId: `a-${i % 3}`, payload: { i } }));

describe('createDispatcher and the recorded engine', () => {
  it('drains the lanes tables on a schema that records lanes, in order, and declares its unordered topics', async () => {
    const schema = await schemaOf('d_lanes', 'lanes');
    const written = await write(schema, messages(9));
    expect(await count(`SELECT count(*) FROM d_lanes.outbox_lane_messages`)).toBe(9);
    const publisher = new InMemoryPublisher();
    const dispatcher = createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      schema,
      unorderedTopics: ['mail.*'],
    });
    const result = await dispatcher.drain();
    expect(result.published).toBe(9);
    expect(publisher.published.map((m) => m.id).sort()).toEqual(
      written.map((m) => m.messageId).sort(),
    );
    for (const aggregate of ['a-0', 'a-1', 'a-2']) {
      const seqs = publisher.published
        .filter((m) => m.aggregateId === aggregate)
        .map((m) => Number(m.sequence));
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    }
    expect(
      await count(`SELECT count(*) FROM d_lanes.outbox_unordered_topics WHERE pattern = 'mail.%'`),
    ).toBe(1);
  });

  it('runs, forwards its events and stops on either engine, the same code', async () => {
    for (const engine of ['claims', 'lanes'] as const) {
      const schema = await schemaOf(`d_run_${engine}`, engine);
      const publisher = new InMemoryPublisher();
      const dispatcher = createDispatcher({
        executor: fromPg(db.pool),
        publisher,
        schema,
        pollIntervalMs: 20,
      });
      const outcomes: string[] = [];
      dispatcher.on('dispatcher:publish:outcome', ({ message }) => outcomes.push(message.id));
      expect(dispatcher.state).toBe('created');
      dispatcher.start();
      expect(dispatcher.state).toBe('running');
      const written = await write(schema, messages(4));
      await expect.poll(() => publisher.published.length, { timeout: 10_000 }).toBe(4);
      expect(outcomes.sort()).toEqual(written.map((m) => m.messageId).sort());
      // Counted when the batch's settle commits, which may follow the publish and its event.
      await expect.poll(() => dispatcher.stats().published, { timeout: 10_000 }).toBe(4);
      await dispatcher.stop();
      expect(dispatcher.state).toBe('stopped');
      const table = engine === 'lanes' ? 'outbox_lane_messages' : 'outbox';
      // Written where the record says: the claim engine's rows leave `outbox` when published.
      expect(
        await count(`SELECT count(*) FROM ${schema}.${table}`),
        `${engine}: rows left in ${table}`,
      ).toBe(engine === 'lanes' ? 4 : 0);
    }
  });

  it('refuses the claim engine’s own options when the schema records lanes: drain throws, start retries until the record allows them', async () => {
    const schema = await schemaOf('d_refuse', 'lanes');
    const publisher = new InMemoryPublisher();
    const options = { executor: fromPg(db.pool), publisher, schema, asyncSettle: true };
    await expect(createDispatcher(options).drain()).rejects.toThrow(
      /asyncSettle: is not taken by the lanes engine \(schema "d_refuse" records lanes\)/,
    );
    const dispatcher = createDispatcher({ ...options, pollIntervalMs: 20 });
    const failures: string[] = [];
    dispatcher.on('dispatcher:claim:failure', ({ error }) => failures.push(error.message));
    dispatcher.start();
    await expect.poll(() => failures.length, { timeout: 5_000 }).toBeGreaterThanOrEqual(2);
    // Nothing written while refused; the record moved back to claims, it runs the claim engine.
    await setDatabaseEngine(fromPg(db.pool), 'claims', { schema });
    const written = await write(schema, messages(2));
    await expect.poll(() => publisher.published.length, { timeout: 15_000 }).toBe(2);
    expect(publisher.published.map((m) => m.id).sort()).toEqual(
      written.map((m) => m.messageId).sort(),
    );
    await dispatcher.stop();
  });

  it("takes engine: 'lanes' outright and checks its options at once", async () => {
    const schema = await schemaOf('d_told', 'claims');
    const executor = fromPg(db.pool);
    const publisher = new InMemoryPublisher();
    const written = await inTransaction(db.pool, (c) =>
      createOutbox({ schema, engine: 'lanes' }).enqueue(fromPg(c), messages(3)),
    );
    const result = await createDispatcher({ executor, publisher, schema, engine: 'lanes' }).drain();
    expect(result.published).toBe(3);
    expect(publisher.published.map((m) => m.id).sort()).toEqual(
      written.map((m) => m.messageId).sort(),
    );
    expect(() =>
      createDispatcher({
        executor,
        publisher,
        engine: 'lanes',
        store: new PgOutboxStore(executor),
      }),
    ).toThrow(/store: is not taken by the lanes engine/);
    expect(() =>
      createDispatcher({ executor, publisher, engine: 'lanes', claimShape: 'runs-first' }),
    ).toThrow(OutboxValidationError);
    expect(() => createDispatcher({ executor, publisher, engine: 'queues' as never })).toThrow(
      /engine: must be 'claims' or 'lanes', got "queues"/,
    );
  });
});
