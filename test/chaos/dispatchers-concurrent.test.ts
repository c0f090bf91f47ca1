import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../src/index.js';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { checkHistory, type ExpectedMessage } from '../helpers/history.js';
import { enqueueCommitted } from '../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase();
  // A little random latency per request widens every race window.
  receiver = await startWebhookReceiver({ holdMs: () => Math.random() * 3 });
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});

describe('four dispatcher processes on one outbox', () => {
  it('20,000 messages over 500 aggregates: none lost, none published concurrently twice, per-aggregate order held', async () => {
    const dispatchers: CliProcess[] = Array.from({ length: 4 }, () =>
      startCli([
        'dispatch',
        '--database-url',
        db.url,
        '--publisher',
        receiver.url,
        '--batch-size',
        '100',
        '--lease-ms',
        '20000',
        '--poll-interval-ms',
        '50',
        '--unordered',
        'mail.*',
      ]),
    );
    // Written while the dispatchers run, in 40 transactions of 500, so claims race commits.
    const expected: ExpectedMessage[] = [];
    for (let t = 0; t < 40; t++) {
      const batch: OutboxMessage[] = Array.from({ length: 500 }, (_, i) => ({
        topic: i % 10 === 0 ? 'mail.send' : 'payment.charge',
        aggregateId: `agg-${i}`,
        payload: { t, i },
      }));
      const written = await enqueueCommitted(db.pool, batch);
      written.forEach((m) =>
        expected.push({
          messageId: m.messageId,
          aggregateId: m.aggregateId,
          sequence: m.sequence,
          ordered: m.topic !== 'mail.send',
        }),
      );
    }
    await expect.poll(() => receiver.distinct(), { timeout: 240_000, interval: 500 }).toBe(20_000);
    for (const d of dispatchers) d.child.kill('SIGTERM');
    const codes = await Promise.all(dispatchers.map((d) => d.exited));
    expect(codes, dispatchers.map((d) => d.output()).join('\n---\n')).toEqual([0, 0, 0, 0]);

    const report = checkHistory(expected, receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    // No crash, no expired lease: no duplicate at all is expected.
    expect(report.duplicates).toBe(0);
    const { rows } = await db.pool.query(
      'SELECT count(*)::int AS pending FROM outbox WHERE dispatched_at IS NULL',
    );
    expect(rows[0].pending).toBe(0);
    // All four took part (SKIP LOCKED shares the work rather than serialising it).
    const publishedBy = dispatchers.map((d) =>
      Number(/stopped published=(\d+)/.exec(d.output())?.[1] ?? -1),
    );
    expect(
      publishedBy.every((n) => n > 0),
      String(publishedBy),
    ).toBe(true);
    expect(publishedBy.reduce((a, b) => a + b, 0)).toBe(20_000);
  }, 300_000);
});
