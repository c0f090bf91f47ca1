import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createOutbox,
  fromPg,
  OutboxValidationError,
  type OutboxMessage,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

let db: TestDatabase;
const outbox = createOutbox();

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query('CREATE TABLE orders (id serial PRIMARY KEY, amount int NOT NULL)');
});
afterAll(() => db.drop());

async function count(sql = 'SELECT count(*)::int AS n FROM outbox'): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(sql);
  return rows[0]!.n;
}

const charge = (orderId: number): OutboxMessage => ({
  topic: 'payment.charge',
  aggregateId: `order:${orderId}`,
  payload: { orderId, amount: 1200 },
});

describe('enqueue with pg', () => {
  it('contract (a): a transaction that throws after its second insert leaves no outbox row (G1)', async () => {
    const before = await count();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<{ id: number }>(
        'INSERT INTO orders (amount) VALUES (1200) RETURNING id',
      );
      await outbox.enqueue(fromPg(client), charge(rows[0]!.id));
      await outbox.enqueue(fromPg(client), {
        topic: 'mail.send',
        aggregateId: `order:${rows[0]!.id}`,
        payload: {},
      });
      expect(
        await client.query('SELECT count(*)::int AS n FROM outbox').then((r) => r.rows[0].n),
      ).toBe(before + 2);
      throw new Error('business failure after the second insert');
    } catch (error) {
      await client.query('ROLLBACK');
      expect((error as Error).message).toMatch(/business failure/);
    } finally {
      client.release();
    }
    expect(await count()).toBe(before);
  });

  it('commits one message with every column filled', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const result = await outbox.enqueue(fromPg(client), {
        ...charge(1),
        headers: { tenant: 'acme' },
        tenantId: 't1',
      });
      await client.query('COMMIT');
      expect(result.messageId).toMatch(/^[0-9a-f-]{36}$/);
      expect(result.sequence).toBe(1);
      const { rows } = await db.pool.query('SELECT * FROM outbox WHERE message_id = $1', [
        result.messageId,
      ]);
      expect(rows[0]).toMatchObject({
        topic: 'payment.charge',
        aggregate_id: 'order:1',
        payload: { orderId: 1, amount: 1200 },
        headers: { tenant: 'acme', tenant_id: 't1', schema_version: '1' },
        attempts: 0,
        dispatched_at: null,
        last_error: null,
        lease_owner: null,
        dead_lettered_at: null,
      });
      expect(String(rows[0].id)).toBe(result.id);
    } finally {
      client.release();
    }
  });

  it('writes 500 messages in one statement and returns them in input order with per-aggregate sequences', async () => {
    const messages: OutboxMessage[] = Array.from({ length: 500 }, (_, i) => ({
      topic: i % 2 ? 'mail.send' : 'payment.charge',
      aggregateId: `bulk:${i % 7}`,
      payload: { i },
    }));
    const statements: string[] = [];
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const executor = fromPg(client);
      const counting = {
        query: (text: string, values?: readonly unknown[]) => (
          statements.push(text),
          executor.query(text, values)
        ),
      };
      const result = await outbox.enqueue(counting as typeof executor, messages);
      await client.query('COMMIT');
      expect(statements).toHaveLength(1);
      expect(result).toHaveLength(500);
      result.forEach((row, i) => {
        expect(row.aggregateId).toBe(`bulk:${i % 7}`);
        expect(row.sequence).toBe(Math.floor(i / 7) + 1);
      });
      const { rows } = await db.pool.query<{ i: number; sequence: string; message_id: string }>(
        `SELECT (payload->>'i')::int AS i, sequence, message_id FROM outbox WHERE aggregate_id LIKE 'bulk:%'`,
      );
      expect(rows).toHaveLength(500);
      for (const row of rows) expect(result[row.i]!.messageId).toBe(row.message_id);
    } finally {
      client.release();
    }
  });

  it('sets available_at from delayMs and availableAt', async () => {
    const at = new Date(Date.now() + 3_600_000);
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      const [delayed, scheduled] = await outbox.enqueue(fromPg(client), [
        { ...charge(2), delayMs: 60_000 },
        { ...charge(3), availableAt: at },
      ]);
      const { rows } = await client.query<{
        delay_ms: number;
        message_id: string;
        available_at: Date;
      }>(
        `SELECT message_id, available_at, extract(epoch FROM available_at - created_at) * 1000 AS delay_ms FROM outbox WHERE message_id = ANY($1)`,
        [[delayed!.messageId, scheduled!.messageId]],
      );
      await client.query('COMMIT');
      const byId = new Map(rows.map((r) => [r.message_id, r]));
      expect(Number(byId.get(delayed!.messageId)!.delay_ms)).toBeCloseTo(60_000, -1);
      expect(byId.get(scheduled!.messageId)!.available_at.getTime()).toBe(at.getTime());
    } finally {
      client.release();
    }
  });

  it('an empty batch is a no-op that runs no SQL', async () => {
    let calls = 0;
    const result = await outbox.enqueue({ query: async () => (calls++, { rows: [] }) }, []);
    expect(result).toEqual([]);
    expect(calls).toBe(0);
  });

  it('a batch with one bad message writes nothing, names the field, and runs no SQL', async () => {
    let calls = 0;
    const before = await count();
    const bad = [charge(4), { ...charge(5), payload: { n: 10n } }] as unknown as OutboxMessage[];
    const error = await outbox
      .enqueue({ query: async () => (calls++, { rows: [] }) }, bad)
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OutboxValidationError);
    expect((error as OutboxValidationError).field).toBe('messages[1].payload.n');
    expect(calls).toBe(0);
    expect(await count()).toBe(before);
  });

  it('a plain INSERT with only the reference columns produces a valid message (interoperability)', async () => {
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('plain:1', 'mail.send', '{"to":"a@b"}')`,
    );
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES ('plain:1', 'mail.send', '{}', '{"x":"y"}')`,
    );
    const { rows } = await db.pool.query(
      `SELECT * FROM outbox WHERE aggregate_id = 'plain:1' ORDER BY sequence`,
    );
    expect(rows.map((r) => Number(r.sequence))).toEqual([1, 2]);
    for (const row of rows) {
      expect(row.message_id).toMatch(/^[0-9a-f-]{36}$/);
      expect(row.attempts).toBe(0);
      expect(row.available_at).toBeInstanceOf(Date);
      expect(row.dispatched_at).toBeNull();
    }
    expect(rows[1].headers).toEqual({ x: 'y' });
  });

  it('rejects a bad schema name before touching the database', () => {
    expect(() => createOutbox({ schema: 'public; DROP TABLE outbox' })).toThrow(
      OutboxValidationError,
    );
    expect(() => createOutbox({ schema: 'Outbox' })).toThrow(/valid identifier/);
  });
});

describe('message ids (migration 007)', () => {
  it('are UUIDv7: version 7, RFC 9562 variant, the creation millisecond in front, so they sort by time', async () => {
    const ids: { messageId: string; at: number }[] = [];
    for (let i = 0; i < 3; i++) {
      const before = Date.now();
      const written = await outbox.enqueue(fromPg(db.pool), charge(9000 + i), {
        allowAutocommit: true,
      });
      ids.push({ messageId: written.messageId, at: before });
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    for (const { messageId, at } of ids) {
      expect(messageId).toMatch(
        /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
      );
      const millis = parseInt(messageId.replaceAll('-', '').slice(0, 12), 16);
      // The database clock may differ a little from ours; a minute is far from random bits.
      expect(Math.abs(millis - at)).toBeLessThan(60_000);
    }
    const texts = ids.map((i) => i.messageId);
    expect([...texts].sort()).toEqual(texts);
  });

  it('a plain INSERT that names no message_id gets a v7 too', async () => {
    const { rows } = await db.pool.query<{ message_id: string }>(
      `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('plain:1', 'mail.send', '{}') RETURNING message_id::text`,
    );
    expect(rows[0]!.message_id[14]).toBe('7');
  });
});

describe('prepared statements (fromPg)', () => {
  it('the writer runs as a named prepared statement on the connection, and not when turned off', async () => {
    const prepared = async (preparedStatements: boolean) => {
      const client = await db.pool.connect();
      try {
        await client.query('DEALLOCATE ALL');
        // A fresh connection object: pg remembers which names it prepared per client.
        (
          client as unknown as { connection: { parsedStatements: object } }
        ).connection.parsedStatements = {};
        await outbox.enqueue(fromPg(client, { preparedStatements }), charge(9100), {
          allowAutocommit: true,
        });
        const { rows } = await client.query<{ n: number }>(
          `SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'agent_outbox_%' AND statement LIKE '%INSERT INTO%outbox%'`,
        );
        return rows[0]!.n;
      } finally {
        client.release();
      }
    };
    expect(await prepared(true)).toBe(1);
    expect(await prepared(false)).toBe(0);
  });
});
