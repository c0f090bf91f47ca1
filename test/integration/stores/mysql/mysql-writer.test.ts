import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import { migrateMysql } from '../../../../src/stores/mysql/migrate-mysql.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

const up = await requireMysql();

describe.runIf(up)('MySQL writer and schema (MariaDB)', () => {
  let db: MysqlTestDatabase;
  beforeEach(async () => {
    db = await createMysqlTestDatabase();
  });
  afterEach(async () => {
    await db.drop();
  });

  const rows = async (sql: string, values?: unknown[]) =>
    (await db.pool.query(sql, values))[0] as Record<string, unknown>[];

  it('migrates once: a second run (and a concurrent one) applies nothing', async () => {
    const again = await Promise.all([migrateMysql(db.pool), migrateMysql(db.pool)]);
    expect(again.map((r) => r.applied)).toEqual([[], []]);
    expect(await rows('SELECT version, name FROM outbox_migrations ORDER BY version')).toEqual([
      { version: 1, name: 'initial' },
      { version: 2, name: 'consumer-ledger' },
      { version: 3, name: 'claim-parking' },
    ]);
    // A run that stopped after its ALTERs, before recording the version, is run again: the
    // ALTERs' "already there" errors are taken as done (MySQL 8 has no IF NOT EXISTS for them).
    await db.pool.query('DELETE FROM outbox_migrations WHERE version = 3');
    expect((await migrateMysql(db.pool)).applied).toEqual([3]);
    // The consumer ledger's tables come with the migrations.
    expect(
      (await rows("SHOW TABLES LIKE 'processed_messages'")).length +
        (await rows("SHOW TABLES LIKE 'consumer_positions'")).length,
    ).toBe(2);
  });

  it('makes a plain SQL INSERT in a business transaction a message, with a sequence per aggregate', async () => {
    const connection = await db.connect();
    try {
      await connection.query('CREATE TABLE orders (id VARCHAR(20) PRIMARY KEY)');
      await connection.beginTransaction();
      await connection.query("INSERT INTO orders VALUES ('7')");
      await connection.query(
        `INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('order:7', 'payment.charge', '{"amount":5}')`,
      );
      await connection.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES ('order:7', 'mail.send', '"receipt"', '{"k":"v"}')`,
      );
      await connection.commit();
    } finally {
      await connection.end();
    }
    const written = await rows(
      'SELECT message_id, aggregate_id, topic, payload, headers, sequence, created_at, available_at, dispatched_at, attempts, ordered FROM outbox ORDER BY id',
    );
    expect(written).toHaveLength(2);
    expect(written.map((r) => [r.topic, r.sequence, r.headers])).toEqual([
      ['payment.charge', 1, '{}'],
      ['mail.send', 2, '{"k":"v"}'],
    ]);
    for (const r of written) {
      expect(r.message_id).toMatch(
        /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/,
      );
      expect(Math.abs(Number(r.created_at) - Date.now())).toBeLessThan(600_000);
      expect(r.available_at).toBe(r.created_at);
      expect([r.dispatched_at, r.attempts, r.ordered]).toEqual([null, 0, 1]);
    }
    // The writer continues the same aggregate's sequence.
    const c2 = await db.connect();
    try {
      await c2.beginTransaction();
      const [m] = await createMysqlOutbox().enqueue(c2, [
        { topic: 't', aggregateId: 'order:7', payload: 1 },
      ]);
      await c2.commit();
      expect(m!.sequence).toBe(3);
    } finally {
      await c2.end();
    }
  });

  it('refuses a plain INSERT whose payload is not JSON (the CHECK)', async () => {
    await expect(
      db.pool.query(
        "INSERT INTO outbox (aggregate_id, topic, payload) VALUES ('a', 't', 'not json')",
      ),
    ).rejects.toThrow(/outbox_payload_json/);
    expect(await rows('SELECT * FROM outbox')).toEqual([]);
  });

  it('gives sequences in commit order: a second transaction on an aggregate waits for the first', async () => {
    const outbox = createMysqlOutbox();
    const first = await db.connect();
    const second = await db.connect();
    try {
      await first.beginTransaction();
      await second.beginTransaction();
      await outbox.enqueue(first, { topic: 't', aggregateId: 'hot', payload: 'first' });
      // The second writer blocks on the aggregate's row lock until the first ends.
      const waiting = outbox.enqueue(second, { topic: 't', aggregateId: 'hot', payload: 'second' });
      let settled = false;
      void waiting.then(() => (settled = true));
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(settled).toBe(false);
      await first.rollback();
      const m = await waiting;
      await second.commit();
      // The rolled-back transaction gave its sequence back: no hole for consumers.
      expect(m.sequence).toBe(1);
    } finally {
      await first.end();
      await second.end();
    }
  });

  it('writes delays on the server clock and absolute times as given', async () => {
    const connection = await db.connect();
    try {
      await connection.beginTransaction();
      const at = new Date(Date.UTC(2030, 0, 1));
      await createMysqlOutbox().enqueue(connection, [
        { topic: 't', aggregateId: 'a', payload: 1, delayMs: 60_000 },
        { topic: 't', aggregateId: 'b', payload: 2, availableAt: at },
      ]);
      await connection.commit();
    } finally {
      await connection.end();
    }
    const [delayed, absolute] = await rows(
      'SELECT available_at - created_at AS delay, available_at FROM outbox ORDER BY id',
    );
    expect(Number(delayed!.delay)).toBe(60_000);
    expect(Number(absolute!.available_at)).toBe(Date.UTC(2030, 0, 1));
  });
});
