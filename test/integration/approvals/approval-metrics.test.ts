/**
 * Issue 20: `outbox_awaiting_approval_messages` and `outbox_oldest_awaiting_approval_age_seconds`
 * (read from the database like the other gauges), and held messages kept out of the backlog
 * gauges — a refund waiting a day for a person is no dispatch lag.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approveMessages, fromPg, rejectMessages } from '../../../src/index.js';
import { createOutboxMetrics } from '../../../src/metrics/outbox-metrics.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';

function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

describe('approval metrics', () => {
  it('count what waits and the oldest wait; decided or expired messages leave both gauges', async () => {
    const metrics = createOutboxMetrics({ executor: fromPg(db.pool) });
    const read = async () => {
      await metrics.refresh();
      const text = await metrics.registry.metrics();
      return {
        waiting: sample(text, 'outbox_awaiting_approval_messages'),
        oldest: sample(text, 'outbox_oldest_awaiting_approval_age_seconds'),
        pending: sample(text, 'outbox_pending_messages'),
        lag: sample(text, 'outbox_oldest_pending_age_seconds'),
        dead: sample(text, 'outbox_dead_letter_messages'),
      };
    };
    expect(await read()).toEqual({ waiting: 0, oldest: 0, pending: 0, lag: 0, dead: 0 });

    const [a, b, c] = await enqueueCommitted(db.pool, [
      { topic: 'payment.refund', aggregateId: 'o:1', payload: {}, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'o:2', payload: {}, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'o:3', payload: {}, requiresApproval: true },
    ]);
    await db.pool.query(`UPDATE outbox SET created_at = now() - interval '2 hours' WHERE id = $1`, [
      a!.id,
    ]);
    await db.pool.query(
      `UPDATE outbox SET created_at = now() - interval '30 minutes' WHERE id = $1`,
      [b!.id],
    );
    let now = await read();
    expect(now).toMatchObject({ waiting: 3, pending: 0, lag: 0, dead: 0 });
    expect(now.oldest).toBeGreaterThanOrEqual(7200);
    expect(now.oldest).toBeLessThan(7300);

    await rejectMessages(fromPg(db.pool), [a!.id], { by: 'ops', reason: 'no' });
    now = await read();
    expect(now).toMatchObject({ waiting: 2, dead: 0 });
    expect(now.oldest).toBeGreaterThanOrEqual(1800);
    expect(now.oldest).toBeLessThan(1900);

    await db.pool.query(
      `UPDATE outbox SET approval_expires_at = now() - interval '1 s' WHERE id = $1`,
      [b!.id],
    );
    await approveMessages(fromPg(db.pool), [c!.id], { by: 'ops' });
    now = await read();
    // b expired (not swept yet), c approved and due: backlog again.
    expect(now).toMatchObject({ waiting: 0, oldest: 0, pending: 1, dead: 0 });
  });
});
