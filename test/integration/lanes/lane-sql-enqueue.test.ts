import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createOutbox } from '../../../src/index.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { notifyChannel } from '../../../src/sql/notify.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { armed, enqueueLanes, listenWakeSource } from '../../helpers/lanes.js';
import { inTransaction as inPoolTransaction } from '../../helpers/transaction.js';

/**
 * Plain-SQL enqueue on the lanes engine (migration 030, sql/lane-enqueue.ts): the function
 * `outbox_lane_enqueue` and the view `outbox_lane_inbox`, written inside the caller's own
 * transaction as another language would, published by a real lane dispatcher with the TypeScript
 * writer's messages of the same aggregates.
 */
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const NO_BACKOFF = { baseMs: 0, maxMs: 0, jitterMs: 0 };
const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);

const inTransaction = <T>(fn: (client: pg.PoolClient) => Promise<T>) =>
  inPoolTransaction(db.pool, fn);

const sqlEnqueue = (client: pg.PoolClient, aggregate: string, n: number) =>
  client.query<{ id: string; message_id: string; sequence: string; lane: number }>(
    `SELECT id::text, message_id::text, sequence::text, lane
       FROM outbox_lane_enqueue('payment.charge', $1, jsonb_build_object('n', $2::int))`,
    [aggregate, n],
  );

describe('lanes engine: plain-SQL enqueue (migration 030)', () => {
  it('writes in the caller transaction; a dispatcher publishes SQL and TypeScript messages of an aggregate in order', async () => {
    const lanes = createOutbox({ engine: 'lanes' });
    // Interleaved in one transaction: SQL, TypeScript, the view (two rows), SQL.
    const ids = await inTransaction(async (client) => {
      await client.query('INSERT INTO outbox_unordered_topics (pattern) VALUES ($1)', ['audit.%']);
      const first = (await sqlEnqueue(client, 'order-1', 1)).rows[0]!;
      const [second] = await lanes.enqueue(fromPg(client), [
        { topic: 'payment.charge', aggregateId: 'order-1', payload: { n: 2 } },
      ]);
      const viewed = await client.query<{ message_id: string; sequence: string }>(
        `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload, headers)
         VALUES ('payment.charge', 'order-1', '{"n": 3}', '{"tenant_id": "acme"}'),
                ('audit.log', 'order-1', '{"n": 4}', NULL)
         RETURNING message_id::text, sequence::text`,
      );
      const last = (await sqlEnqueue(client, 'order-1', 5)).rows[0]!;
      return [first, second!, viewed.rows, last] as const;
    });
    const [first, second, viewed, last] = ids;
    expect([
      first.sequence,
      String(second.sequence),
      ...viewed.map((r) => r.sequence),
      last.sequence,
    ]).toEqual(['1', '2', '3', '4', '5']);
    const rows = await db.pool.query<{ ordered: boolean; headers: Record<string, string> }>(
      `SELECT ordered, headers FROM outbox_lane_messages ORDER BY id`,
    );
    // ordered from outbox_unordered_topics; schema_version added as the writer adds it.
    expect(rows.rows.map((r) => r.ordered)).toEqual([true, true, true, false, true]);
    expect(rows.rows[2]!.headers).toEqual({ tenant_id: 'acme', schema_version: '1' });
    expect(rows.rows[0]!.headers).toEqual({ schema_version: '1' });

    // More of the same aggregate from another TypeScript transaction, then a drain.
    const [sixth] = await enqueueLanes(db.pool, [
      { topic: 'payment.charge', aggregateId: 'order-1', payload: { n: 6 } },
    ]);
    expect(sixth!.sequence).toBe(6);
    const publisher = new InMemoryPublisher();
    await createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
    // In order, the unordered one (audit.log, sequence 4) anywhere: it takes no part in order.
    const ordered = publisher.published.filter((m) => m.topic !== 'audit.log');
    expect(ordered.map((m) => [m.sequence, (m.payload as { n: number }).n])).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
      [5, 5],
      [6, 6],
    ]);
    expect(ordered.map((m) => m.id)).toEqual([
      first.message_id,
      second.messageId,
      viewed[0]!.message_id,
      last.message_id,
      sixth!.messageId,
    ]);
    expect(publisher.published.find((m) => m.topic === 'audit.log')?.id).toBe(
      viewed[1]!.message_id,
    );
  });

  it('writes nothing when the transaction rolls back, and the next sequence is not taken', async () => {
    await expect(
      inTransaction(async (client) => {
        await sqlEnqueue(client, 'order-2', 1);
        await client.query(
          `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload) VALUES ('t', 'order-2', '{}')`,
        );
        throw new Error('the business write failed');
      }),
    ).rejects.toThrow('the business write failed');
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(0);
    const written = await inTransaction((client) => sqlEnqueue(client, 'order-2', 1));
    expect(written.rows[0]!.sequence).toBe('1');
  });

  it('refuses bad input with an error that says what to do, and writes nothing', async () => {
    const bad: [string, string][] = [
      [`outbox_lane_enqueue('', 'a', '{}')`, 'topic must not be empty'],
      [`outbox_lane_enqueue('t', '  ', '{}')`, 'aggregate_id must not be empty'],
      [`outbox_lane_enqueue(repeat('t', 256), 'a', '{}')`, 'the limit is 255'],
      [`outbox_lane_enqueue('t', 'a', NULL)`, 'payload is missing'],
      [`outbox_lane_enqueue('t', 'a', '{}', '[1]')`, 'headers must be a JSON object'],
      [`outbox_lane_enqueue('t', 'a', '{}', '{"n": 1}')`, 'headers.n must be a string'],
      [`outbox_lane_enqueue('t', 'a', '{}', '{"": "x"}')`, 'empty header name'],
      [`outbox_lane_enqueue('t', 'a', '{}', '{"tenant_id": " "}')`, 'headers.tenant_id'],
      [`outbox_lane_enqueue('t', 'a', '{}', delay_ms => -1)`, 'delay_ms must be a finite number'],
      [`outbox_lane_enqueue('t', 'a', '{}', delay_ms => 'NaN')`, 'delay_ms must be a finite'],
      [`outbox_lane_enqueue('t', 'a', '{}', delay_ms => 1, available_at => now())`, 'not both'],
      [`outbox_lane_enqueue('t', 'a', '{}', available_at => 'infinity')`, 'must be a finite time'],
    ];
    for (const [call, message] of bad) {
      const error = await db.pool.query(`SELECT * FROM ${call}`).then(
        () => undefined,
        (e: pg.DatabaseError) => e,
      );
      expect(error, call).toBeDefined();
      expect(error!.message, call).toContain(message);
      expect(error!.code, call).toBe('22023');
    }
    const big = await db.pool
      .query(
        `SELECT * FROM outbox_lane_enqueue('t', 'a', jsonb_build_object('x', repeat('y', 1048576)))`,
      )
      .then(
        () => undefined,
        (e: pg.DatabaseError) => e,
      );
    expect(big!.message).toContain('the limit is 1048576');
    expect(big!.hint).toContain('agent_outbox.max_payload_bytes');

    // A multi-row INSERT with one bad row writes none of its rows; the transaction is aborted.
    await expect(
      inTransaction((client) =>
        client.query(
          `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload)
           VALUES ('t', 'a', '{}'), ('t', 'b', NULL)`,
        ),
      ),
    ).rejects.toThrow('payload is missing');
    // The view is an entrance only: it has no rows, and UPDATE or DELETE is refused.
    await expect(db.pool.query('DELETE FROM outbox_lane_inbox')).rejects.toThrow(/cannot delete/);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM outbox_aggregates')).toBe(0);
  });

  it('a delayed message parks until due, and its aggregate waits behind it', async () => {
    await inTransaction(async (client) => {
      await client.query(
        `SELECT * FROM outbox_lane_enqueue('t', 'later', '{"n": 1}', delay_ms => 400)`,
      );
      await sqlEnqueue(client, 'later', 2);
      await sqlEnqueue(client, 'now', 1);
    });
    const publisher = new InMemoryPublisher();
    const dispatcher = () =>
      createLaneDispatcher({ executor: fromPg(db.pool), publisher, backoff: NO_BACKOFF });
    await dispatcher().drain();
    expect(publisher.published.map((m) => m.aggregateId)).toEqual(['now']);
    await new Promise((resolve) => setTimeout(resolve, 450));
    await dispatcher().drain();
    expect(publisher.published.map((m) => `${m.aggregateId}:${m.sequence}`)).toEqual([
      'now:1',
      'later:1',
      'later:2',
    ]);
  });

  it('orders writers of an aggregate by commit: the second waits on the counter row, takes the later id', async () => {
    const lanes = createOutbox({ engine: 'lanes' });
    const first = await db.pool.connect();
    try {
      await first.query('BEGIN');
      const a = (await sqlEnqueue(first, 'order-3', 1)).rows[0]!;
      // A TypeScript writer of the same aggregate blocks on the counter row until the SQL one
      // commits; then its id and sequence come after.
      const second = inTransaction((client) =>
        lanes.enqueue(fromPg(client), [{ topic: 't', aggregateId: 'order-3', payload: null }]),
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      await first.query('COMMIT');
      const [b] = await second;
      expect(a.sequence).toBe('1');
      expect(b!.sequence).toBe(2);
      expect(BigInt(b!.id)).toBeGreaterThan(BigInt(a.id));
    } finally {
      first.release();
    }
  });

  it('wakes an armed dispatcher: the NOTIFY names the message, published without the poll', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const payloads: string[] = [];
    listener.on('notification', (n) => payloads.push(n.payload ?? ''));
    await listener.query(`LISTEN "${notifyChannel('public')}"`);
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 60_000,
      wakeSource: listenWakeSource(db.url),
    });
    try {
      dispatcher.start();
      await armed(db.pool);
      await dispatcher.onIdle();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const written = await inTransaction((client) => sqlEnqueue(client, 'order-4', 1));
      const { lane, id, message_id: messageId } = written.rows[0]!;
      for (let i = 0; i < 100 && publisher.published.length === 0; i++)
        await new Promise((resolve) => setTimeout(resolve, 20));
      expect(publisher.published.map((m) => m.id)).toEqual([messageId]);
      expect(payloads).toContain(`${lane}:${id}`);
    } finally {
      await dispatcher.stop();
      await listener.end();
    }
  });

  it('names at most 64 messages of a transaction, then wakes without names', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const payloads: string[] = [];
    listener.on('notification', (n) => payloads.push(n.payload ?? ''));
    await listener.query(`LISTEN "${notifyChannel('public')}"`);
    try {
      await db.pool.query(
        `INSERT INTO outbox_waiters (dispatcher_id, expires_at) VALUES ('test', now() + interval '1 minute')`,
      );
      await inTransaction((client) =>
        client.query(
          `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload)
           SELECT 't', 'bulk', jsonb_build_object('n', g) FROM generate_series(1, 100) g`,
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(payloads.filter((p) => p !== '')).toHaveLength(64);
      expect(payloads.filter((p) => p === '')).toHaveLength(1);
    } finally {
      await listener.end();
    }
  });
});
