import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../../src/core/message.js';
import { InMemoryPublisher } from '../../../../src/publishers/memory/in-memory-publisher.js';
import { createMysqlDispatcher } from '../../../../src/stores/mysql/mysql-dispatcher.js';
import { MysqlOutboxStore } from '../../../../src/stores/mysql/mysql-outbox-store.js';
import { createMysqlOutbox } from '../../../../src/stores/mysql/mysql-writer.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

/**
 * Runs on MySQL (src/sql/mysql/claim.ts `runsBehindSql`): a claim takes a hot aggregate's next
 * messages behind its head, in sequence order, up to the batch; a failure in the middle of a run
 * holds back the rest of it (G4).
 */
const up = await requireMysql();

describe.runIf(up)('MySQL claim: runs behind a head (MariaDB)', () => {
  let db: MysqlTestDatabase;
  beforeEach(async () => {
    db = await createMysqlTestDatabase({ prefix: 'b45b_runs_' });
  });
  afterEach(async () => {
    await db.drop();
  });

  const write = async (messages: OutboxMessage[]) => {
    const connection = await db.connect();
    try {
      await connection.beginTransaction();
      await createMysqlOutbox().enqueue(connection, messages);
      await connection.commit();
    } finally {
      await connection.end();
    }
  };
  const chain = (aggregateId: string, n: number): OutboxMessage[] =>
    Array.from({ length: n }, (_, i) => ({ topic: 'payment.charge', aggregateId, payload: i }));
  const seqs = (n: number, from = 1) => Array.from({ length: n }, (_, i) => from + i);

  it('takes a run of a hot aggregate, in order, a batch per claim', async () => {
    await write(chain('hot', 120));
    await write(chain('cold', 1));
    const store = new MysqlOutboxStore(db.pool);
    const rounds: number[][] = [];
    for (let i = 0; i < 10; i++) {
      const owner = `run#${i}`;
      const claimed = await store.claim({ owner, batchSize: 50, leaseMs: 60_000 });
      if (claimed.length === 0) break;
      rounds.push(
        claimed
          .filter((m) => m.aggregateId === 'hot')
          .map((m) => m.sequence)
          .sort((a, b) => a - b),
      );
      await store.settle(
        owner,
        claimed.map((m) => ({ rowId: m.rowId, kind: 'published' })),
      );
    }
    // The first claim holds two heads (hot#1, cold#1): the batch left, 48, is shared between
    // the ordered heads (24 each; cold has nothing behind it).
    expect(rounds).toEqual([seqs(25), seqs(50, 26), seqs(45, 76)]);
  });

  it('stops a run before a committed row another transaction holds, and never waits for a writer', async () => {
    await write(chain('hot', 10));
    const store = new MysqlOutboxStore(db.pool);
    // A claim parking #4 holds its lock for a moment; a writer is adding #11.
    const other = await db.connect();
    const writer = await db.connect();
    try {
      await other.query('BEGIN');
      await other.query(
        "SELECT id FROM outbox WHERE aggregate_id = 'hot' AND sequence = 4 FOR UPDATE",
      );
      await writer.beginTransaction();
      await createMysqlOutbox().enqueue(writer, chain('hot', 1));
      const claimed = await store.claim({ owner: 'gap', batchSize: 20, leaseMs: 60_000 });
      // #5–#10 are free and committed, but after the gap: sending them before #4 breaks order.
      expect(claimed.map((m) => m.sequence).sort((a, b) => a - b)).toEqual([1, 2, 3]);
    } finally {
      await other.end();
      await writer.end();
    }
  });

  it('a failure in the middle of a run holds back the rest; every message goes out once, in order', async () => {
    await write(chain('hot', 60));
    let failed = false;
    const publisher = new InMemoryPublisher({
      inject: (m) => {
        if (m.sequence === 7 && !failed) {
          failed = true;
          return { status: 'retryable', error: 'broker hiccup' };
        }
        return undefined;
      },
    });
    const dispatcher = createMysqlDispatcher({
      pool: db.pool,
      publisher,
      batchSize: 50,
      backoff: { baseMs: 0, maxMs: 0, jitterMs: 0 },
    });
    // Messages per claim: the first is a run of 50, which #7's failure cut.
    const claims: number[] = [];
    dispatcher.on('dispatcher:claim:success', ({ count }) => {
      if (count > 0) claims.push(count);
    });
    for (let i = 0; i < 20 && publisher.published.length < 60; i++) await dispatcher.drain();
    expect(failed).toBe(true);
    // #1–#50 in the first claim; #7 failed, #8–#50 went back; then #7–#56 and #57–#60.
    expect(claims).toEqual([50, 50, 4]);
    // #7 failed once: nothing after it went out before it, and nothing went out twice.
    expect(publisher.published.map((m) => m.sequence)).toEqual(seqs(60));
    const [rows] = await db.pool.query(
      'SELECT sequence, attempts FROM outbox WHERE sequence IN (7, 8) ORDER BY sequence',
    );
    // #7 tried twice; #8, released untried when #7 failed, counts one attempt.
    expect(rows).toEqual([
      { sequence: 7, attempts: 2 },
      { sequence: 8, attempts: 1 },
    ]);
  });
});
