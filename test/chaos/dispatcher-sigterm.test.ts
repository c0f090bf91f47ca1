import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({ holdMs: () => 1_000 });
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});

describe('SIGTERM during a batch', () => {
  it('stops claiming, lets the in-flight publish finish and settles it, exits 0 within the lease', async () => {
    await enqueueCommitted(db.pool, manyMessages(10, 3));
    const dispatcher = startCli([
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--batch-size',
      '10',
      '--lease-ms',
      '15000',
    ]);
    await expect
      .poll(
        async () =>
          (
            await db.pool.query(
              `SELECT count(*)::int AS n FROM outbox WHERE lease_owner IS NOT NULL`,
            )
          ).rows[0].n,
        { timeout: 30_000 },
      )
      .toBe(10);
    dispatcher.child.kill('SIGTERM');
    const started = Date.now();
    expect(await dispatcher.exited).toBe(0);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(dispatcher.output()).toMatch(/stopping: finishing in-flight work/);
    const { rows } = await db.pool.query<{ leased: number; dispatched: number }>(
      `SELECT count(*) FILTER (WHERE lease_owner IS NOT NULL)::int AS leased, count(*) FILTER (WHERE dispatched_at IS NOT NULL)::int AS dispatched FROM outbox_messages`,
    );
    // The batch in flight was delivered and settled; the next heads were never claimed.
    expect(rows[0]).toEqual({ leased: 0, dispatched: 10 });
    expect(receiver.distinct()).toBe(10);
  }, 60_000);
});
