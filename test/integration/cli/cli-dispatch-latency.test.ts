import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../../helpers/cli-process.js';
import type { TestDatabase } from '../../helpers/database.js';
import { createLogicalTestDatabase } from '../../helpers/logical-database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';
import { dropSlots } from '../../fixtures/latency/cdc-helpers.js';

let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  // For `--mode cdc` below; the wake-up tests run on any server.
  db = await createLogicalTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  // drop() also stops a private server: it must run whatever happened before it.
  try {
    await receiver?.close();
    if (db) await dropSlots(db.pool, db.name);
  } finally {
    await db?.drop();
  }
});

const waiters = async () =>
  (
    await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_waiters WHERE expires_at > now()',
    )
  ).rows[0]!.n;

/** Commits one message and waits until the receiver has it. */
async function enqueueAndAwaitDelivery(aggregateId: string): Promise<void> {
  const [message] = await enqueueCommitted(db.pool, [
    { topic: 'mail.send', aggregateId, payload: {} },
  ]);
  await expect
    .poll(() => receiver.envelopes.some((e) => e.id === message!.messageId), { timeout: 20_000 })
    .toBe(true);
}

describe('outbox dispatch wake-ups through the CLI', () => {
  it('LISTEN/NOTIFY is on by default: an idle dispatcher publishes at once, not after its 10-minute poll', async () => {
    const dispatcher = startCli([
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--fallback-poll-ms',
      '600000',
    ]);
    try {
      // Idle and armed: its waiter row makes producers notify. After arming, the dispatcher
      // claims once more before it sleeps; give that claim time to finish, so that what we
      // enqueue next can only be found through a wake-up (the poll is 10 minutes away).
      await expect.poll(waiters, { timeout: 30_000 }).toBe(1);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      await enqueueAndAwaitDelivery('n1');
    } finally {
      dispatcher.child.kill('SIGTERM');
    }
    expect(await dispatcher.exited).toBe(0);
    expect(dispatcher.output()).toMatch(/listen=true/);
    // A stopped dispatcher removes its waiter row, so producers stop notifying.
    expect(await waiters()).toBe(0);
  });

  it('--no-listen polls only: no waiter row is ever written', async () => {
    const dispatcher = startCli([
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--no-listen',
      '--poll-interval-ms',
      '100',
    ]);
    try {
      await enqueueAndAwaitDelivery('n2');
      expect(await waiters()).toBe(0);
    } finally {
      dispatcher.child.kill('SIGTERM');
    }
    expect(await dispatcher.exited).toBe(0);
  });

  it('--mode cdc publishes from the WAL stream in per-aggregate order; --mode cdc --once is refused', async () => {
    const args = [
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--mode',
      'cdc',
      '--slot',
      `cli_${db.name}`.slice(0, 60),
      '--sweep-interval-ms',
      '600000',
    ];
    const refused = startCli([...args, '--once']);
    expect(await refused.exited).toBe(2);

    const cdc = startCli(args);
    try {
      await expect.poll(() => cdc.output(), { timeout: 30_000 }).toMatch(/CDC streaming/);
      const written = await enqueueCommitted(db.pool, [
        { topic: 'payment.charge', aggregateId: 'c1', payload: { n: 1 } },
        { topic: 'payment.charge', aggregateId: 'c1', payload: { n: 2 } },
      ]);
      await expect
        .poll(() => written.every((m) => receiver.envelopes.some((e) => e.id === m.messageId)), {
          timeout: 30_000,
        })
        .toBe(true);
      const order = receiver.envelopes.filter((e) => e.aggregateId === 'c1').map((e) => e.sequence);
      expect(order).toEqual([1, 2]);
    } finally {
      cdc.child.kill('SIGTERM');
    }
    expect(await cdc.exited).toBe(0);
    expect(cdc.output()).toMatch(/replication slot created/);
  });
});
