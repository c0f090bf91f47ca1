import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import { approveMessages } from '../../../src/admin/approvals.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { previewPrune, pruneOutbox } from '../../../src/retention/prune-outbox.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * Retention's `archive: true` on the lanes engine (migration 033): consumed messages move to
 * `outbox_lane_archive` with their columns and their approval decision, parked ones stay until
 * published and are archived then, and a deleting prune still deletes.
 */
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

const mail = (aggregateId: string, n: number): OutboxMessage => ({
  topic: 'mail.send',
  aggregateId,
  payload: { n, text: `message ${n}` },
  headers: { tenant_id: 'acme' },
});

const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);
const HOUR = 3_600_000;
const age = () =>
  db.pool.query(`UPDATE outbox_lane_messages SET created_at = now() - interval '2 hours'`);

describe('lanes engine: retention with archive', () => {
  it('moves consumed messages to outbox_lane_archive, parked ones once they are published', async () => {
    await enqueueLanes(
      db.pool,
      Array.from({ length: 40 }, (_, i) => mail(`r-${i % 4}`, i)),
    );
    let down = true;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        down && m.aggregateId === 'r-0' && m.sequence === 1
          ? { status: 'retryable', error: 'down' }
          : undefined,
    });
    const executor = fromPg(db.pool);
    await createLaneDispatcher({
      executor,
      publisher,
      backoff: { baseMs: HOUR, maxMs: HOUR, jitterMs: 0 },
    }).drain();
    expect(publisher.published).toHaveLength(30);
    const before = await db.pool.query(
      `SELECT lane, id, message_id, aggregate_id, sequence, ordered, topic, payload, headers,
              created_at, available_at, shadow
       FROM outbox_lane_messages ORDER BY lane, id`,
    );
    await age();

    expect((await previewPrune(executor, { olderThanMs: HOUR })).outboxRows).toBe(30);
    const pruned = await pruneOutbox(executor, { olderThanMs: HOUR, archive: true });
    expect(pruned).toMatchObject({ removed: 30, archived: true });
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(10);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(30);
    // Every archived row is the message as it was, column for column (but the aged created_at).
    const archived = await db.pool.query(
      `SELECT lane, id, message_id, aggregate_id, sequence, ordered, topic, payload, headers,
              available_at, shadow, approval_state, archived_at
       FROM outbox_lane_archive ORDER BY lane, id`,
    );
    const original = new Map(before.rows.map((r) => [`${r.lane}:${r.id}`, r]));
    for (const row of archived.rows) {
      const { approval_state, archived_at, ...columns } = row;
      const { created_at: _created, ...was } = original.get(`${row.lane}:${row.id}`)!;
      expect(columns).toEqual(was);
      expect(approval_state).toBeNull();
      expect(archived_at).toBeInstanceOf(Date);
      expect(row.aggregate_id).not.toBe('r-0');
    }
    // A second prune finds nothing more; the parked ten are still there.
    expect((await pruneOutbox(executor, { olderThanMs: HOUR, archive: true })).removed).toBe(0);

    // Published later, in order: each leaves the table for the archive (the prune that passed
    // them archived).
    down = false;
    await db.pool.query(`UPDATE outbox_lane_parked SET available_at = now()`);
    await createLaneDispatcher({ executor, publisher }).drain();
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_parked')).toBe(0);
    expect(
      (
        await db.pool.query<{ sequence: string }>(
          `SELECT sequence FROM outbox_lane_archive WHERE aggregate_id = 'r-0' ORDER BY sequence`,
        )
      ).rows.map((r) => Number(r.sequence)),
    ).toEqual(Array.from({ length: 10 }, (_, i) => i + 1));
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(40);
  });

  it("keeps a held message's decision in its archive row, then prunes the decision", async () => {
    const outbox = createOutbox({ engine: 'lanes' });
    const [held] = await inTransaction(db.pool, (client) =>
      outbox.enqueue(fromPg(client), [
        { ...mail('refund-1', 1), requiresApproval: true, approvalRequestedBy: 'agent-7' },
      ]),
    );
    const executor = fromPg(db.pool);
    await approveMessages(executor, [held!.messageId], {
      by: 'alice',
      note: 'ok',
      engine: 'lanes',
    });
    await createLaneDispatcher({ executor, publisher: new InMemoryPublisher() }).drain();
    await age();
    await db.pool.query(`UPDATE outbox_lane_approvals SET decided_at = now() - interval '2 hours'`);
    expect((await pruneOutbox(executor, { olderThanMs: HOUR, archive: true })).removed).toBe(1);
    const { rows } = await db.pool.query(
      `SELECT message_id::text, approval_state, approval_requested_by, approval_decided_by,
              approval_note, approval_decided_at IS NOT NULL AS decided
       FROM outbox_lane_archive`,
    );
    expect(rows).toEqual([
      {
        message_id: held!.messageId,
        approval_state: 'approved',
        approval_requested_by: 'agent-7',
        approval_decided_by: 'alice',
        approval_note: 'ok',
        decided: true,
      },
    ]);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_approvals')).toBe(0);
  });

  it('a deleting prune deletes, and a parked message it passed is deleted when published, not archived', async () => {
    await enqueueLanes(db.pool, [mail('x', 1), mail('x', 2), mail('y', 1)]);
    let down = true;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        down && m.aggregateId === 'x' ? { status: 'retryable', error: 'down' } : undefined,
    });
    const executor = fromPg(db.pool);
    await createLaneDispatcher({
      executor,
      publisher,
      backoff: { baseMs: HOUR, maxMs: HOUR, jitterMs: 0 },
    }).drain();
    await age();
    expect((await pruneOutbox(executor, { olderThanMs: HOUR })).removed).toBe(1);
    down = false;
    await db.pool.query(`UPDATE outbox_lane_parked SET available_at = now()`);
    await createLaneDispatcher({ executor, publisher }).drain();
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(0);
  });
});
