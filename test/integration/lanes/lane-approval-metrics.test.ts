/**
 * The approval gauges on the lanes engine (migration 027), as on the claim engine
 * (test/integration/approvals/approval-metrics.test.ts): what waits and the oldest wait, and held
 * messages kept out of the backlog gauges once the lane read has parked them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approveMessages, fromPg, rejectMessages } from '../../../src/index.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { createOutboxMetrics } from '../../../src/metrics/outbox-metrics.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';

function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

describe('lanes engine: approval metrics', () => {
  it('count what waits and the oldest wait, not as pending; decided messages leave both', async () => {
    const executor = fromPg(db.pool);
    const metrics = createOutboxMetrics({ executor, engine: 'lanes' });
    const read = async () => {
      await metrics.refresh();
      const text = await metrics.registry.metrics();
      return {
        waiting: sample(text, 'outbox_awaiting_approval_messages'),
        oldest: sample(text, 'outbox_oldest_awaiting_approval_age_seconds'),
        pending: sample(text, 'outbox_pending_messages'),
        dead: sample(text, 'outbox_dead_letter_messages'),
      };
    };
    expect(await read()).toEqual({ waiting: 0, oldest: 0, pending: 0, dead: 0 });

    const [a, b] = await enqueueLanes(db.pool, [
      { topic: 'payment.refund', aggregateId: 'o:1', payload: {}, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'o:2', payload: {}, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'o:3', payload: {} },
    ]);
    await db.pool.query(
      `UPDATE outbox_lane_approvals SET requested_at = now() - interval '2 hours' WHERE id = $1`,
      [a!.id],
    );
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({ executor, publisher, pollIntervalMs: 20 });
    await dispatcher.drain();
    expect(publisher.published.map((m) => m.aggregateId)).toEqual(['o:3']);
    const held = await read();
    expect(held).toMatchObject({ waiting: 2, pending: 0, dead: 0 });
    expect(held.oldest).toBeGreaterThanOrEqual(7_200);

    await approveMessages(executor, [a!.id], { by: 'alice', engine: 'lanes' });
    await dispatcher.drain();
    expect(publisher.published.map((m) => m.aggregateId)).toEqual(['o:3', 'o:1']);
    const one = await read();
    expect(one).toMatchObject({ waiting: 1, pending: 0 });
    expect(one.oldest).toBeLessThan(7_200);
    await rejectMessages(executor, [b!.messageId], { by: 'bob', reason: 'no', engine: 'lanes' });
    expect(await read()).toEqual({ waiting: 0, oldest: 0, pending: 0, dead: 0 });
  });
});
