import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { runUpgradeScenario } from '../../helpers/upgrade-scenario.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Migration 018 (the dispatched ring) on an outbox in use, from version 17 to the latest: chains
 * half dispatched by the version-17 settle (rows that stay in `outbox` with their
 * `dispatched_at`), a head dead-lettered under hold, a held head waiting for approval, and a
 * batch mid-lease whose settle comes only after the migration; then two dispatcher processes side
 * by side (test/helpers/upgrade-scenario.ts). The old dispatched rows stay readable and prunable.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  receiver = await startWebhookReceiver({ holdMs: () => 5 });
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

describe('migration 018 with messages in every state', () => {
  it('settles an old lease into the ring, keeps old dispatched rows, and delivers everything in order', async () => {
    await runUpgradeScenario(db, receiver, {
      from: 17,
      // What version 17 dispatched stays in outbox, dispatched, until a prune.
      leftInOutbox: 10,
      afterMigration: async ({ count }) => {
        expect(
          await count(`SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NOT NULL`),
        ).toBe(10);
        // The old lease's messages went to the ring (in batches since migration 021).
        expect(
          await count(
            `SELECT coalesce(sum(message_count), 0)::int AS n FROM outbox_dispatched_batch_0`,
          ),
        ).toBe(5);
        expect(
          await count(
            `SELECT count(*)::int AS n FROM outbox_messages WHERE dispatched_at IS NOT NULL`,
          ),
        ).toBe(15);
      },
    });
  }, 180_000);
});
