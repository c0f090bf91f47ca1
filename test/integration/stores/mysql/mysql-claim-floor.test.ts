import type mysql from 'mysql2/promise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NOW_MS } from '../../../../src/sql/mysql/clock.js';
import { FLOOR_MARGIN_MS } from '../../../../src/sql/mysql/floor.js';
import { MysqlOutboxStore } from '../../../../src/stores/mysql/mysql-outbox-store.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

/**
 * The claims' floor never passes a message a running transaction is still writing (G2,
 * src/sql/mysql/floor.ts). In each case a dispatcher drains many messages written after the
 * late one, and waits on the server's clock until the floor could pass the late message's key if
 * SAFE were merely "now less the margin"; then the late message's transaction commits, and the
 * dispatcher must still claim it. Without the transaction guards of SAFE (and the dirty read of
 * the first pending key) the floor passes its key and the message is never claimed.
 */
const up = await requireMysql();

const OTHERS = 600;

/** Waits until the server's clock is `ms` past what it reads now. No assertion on time. */
async function waitForServerClock(db: MysqlTestDatabase, ms: number) {
  const nowMs = async () => {
    const [[row]] = (await db.pool.query(`SELECT ${NOW_MS} AS n`)) as unknown as [{ n: number }[]];
    return Number(row!.n);
  };
  const until = (await nowMs()) + ms;
  while ((await nowMs()) < until) await new Promise((resolve) => setTimeout(resolve, 200));
}

let claims = 0;
/** Claims and publishes until a claim comes back empty; the aggregates it published. */
async function drain(store: MysqlOutboxStore): Promise<string[]> {
  const seen: string[] = [];
  for (;;) {
    const owner = `floor#${++claims}`;
    const claimed = await store.claim({ owner, batchSize: 200, leaseMs: 60_000 });
    if (claimed.length === 0) return seen;
    seen.push(...claimed.map((m) => m.aggregateId));
    await store.settle(
      owner,
      claimed.map((m) => ({ rowId: m.rowId, kind: 'published' as const })),
    );
  }
}

/** `count` committed messages on their own aggregates, written now. */
async function insertOthers(db: MysqlTestDatabase, count: number) {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT CONCAT('other-', a.seq), 'payment.charge', '{}' FROM seq_1_to_${count} a`,
  );
}

/** The key of `aggregate`'s last message, read dirty (its transaction may still be open). */
async function keyOf(db: MysqlTestDatabase, aggregate: string): Promise<number> {
  const connection = await db.connect();
  try {
    await connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ UNCOMMITTED');
    const [rows] = await connection.query(
      'SELECT available_at FROM outbox WHERE aggregate_id = ? ORDER BY sequence DESC LIMIT 1',
      [aggregate],
    );
    return Number((rows as { available_at: number }[])[0]!.available_at);
  } finally {
    await connection.end();
  }
}

describe.runIf(up)('MySQL claim floor: no message lost under it', () => {
  let db: MysqlTestDatabase;
  let store: MysqlOutboxStore;
  const connections: mysql.Connection[] = [];
  const outbox = createMysqlOutbox();
  beforeEach(async () => {
    db = await createMysqlTestDatabase({ prefix: 'mysql_floor_' });
    store = new MysqlOutboxStore(db.pool);
  }, 60_000);
  afterEach(async () => {
    for (const connection of connections.splice(0)) await connection.end().catch(() => {});
    await db?.drop();
  });
  const connect = async () => {
    const connection = await db.connect();
    connections.push(connection);
    return connection;
  };

  it('a message written in a transaction held open while the dispatcher drains is claimed after its commit', async () => {
    // The floor moves off 0 first, so the late message is not found by a first walk.
    await insertOthers(db, 10);
    expect(await drain(store)).toHaveLength(10);
    const writer = await connect();
    await writer.beginTransaction();
    await outbox.enqueue(writer, { topic: 'payment.charge', aggregateId: 'late', payload: {} });
    const key = await keyOf(db, 'late');
    await waitForServerClock(db, FLOOR_MARGIN_MS + 1_000);
    await insertOthers(db, OTHERS);
    expect(await drain(store)).toHaveLength(OTHERS);
    // Twice more, the margin apart: with a SAFE of "now less the margin" the floor is past `key`.
    await waitForServerClock(db, FLOOR_MARGIN_MS + 1_000);
    expect(await drain(store)).toEqual([]);
    expect(store.claimFloor).toBeGreaterThan(0);
    expect(
      store.claimFloor,
      'the floor passed a key an open transaction wrote',
    ).toBeLessThanOrEqual(key);
    await writer.commit();
    expect(await drain(store)).toEqual(['late']);
  }, 120_000);

  it('a message whose INSERT waits on a lock while the dispatcher drains is claimed after its commit', async () => {
    await insertOthers(db, 10);
    expect(await drain(store)).toHaveLength(10);
    // A transaction holding the aggregate's row (it wrote nothing: rows_modified 0) makes the
    // writer's INSERT wait inside the insert trigger, its NOW(3) — the key — fixed at its start.
    const earlier = await connect();
    await earlier.beginTransaction();
    await outbox.enqueue(earlier, { topic: 'payment.charge', aggregateId: 'late', payload: {} });
    await earlier.commit();
    expect(await drain(store)).toEqual(['late']);
    const blocker = await connect();
    await blocker.beginTransaction();
    await blocker.query("SELECT * FROM outbox_aggregates WHERE aggregate_id = 'late' FOR UPDATE");
    const writer = await connect();
    await writer.beginTransaction();
    const [[session]] = (await writer.query(
      `SELECT CONNECTION_ID() AS id, ${NOW_MS} AS startMs`,
    )) as unknown as [{ id: number; startMs: number }[]];
    const { id, startMs } = session!;
    const writing = outbox.enqueue(writer, {
      topic: 'payment.charge',
      aggregateId: 'late',
      payload: {},
    });
    // Until the INSERT waits for the lock.
    for (;;) {
      const [rows] = await db.pool.query(
        "SELECT 1 FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'",
        [id],
      );
      if ((rows as unknown[]).length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await waitForServerClock(db, FLOOR_MARGIN_MS + 1_000);
    await insertOthers(db, OTHERS);
    expect(await drain(store)).toHaveLength(OTHERS);
    await waitForServerClock(db, FLOOR_MARGIN_MS + 1_000);
    expect(await drain(store)).toEqual([]);
    expect(store.claimFloor).toBeLessThanOrEqual(startMs);
    await blocker.rollback();
    await writing;
    await writer.commit();
    expect(await keyOf(db, 'late')).toBeGreaterThanOrEqual(startMs);
    expect(await drain(store)).toEqual(['late']);
  }, 120_000);
});
