import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEffectStatus } from '../../../src/admin/effect-status.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { runUpgradeScenario } from '../../helpers/upgrade-scenario.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Migration 021 (the dispatched log in batches) on an outbox in use, from version 20: chains half
 * dispatched by the version-20 settle (one row per message in the ring's per-message tables), a
 * head dead-lettered under hold, a held head waiting for approval, and a batch mid-lease whose
 * settle comes only after the migration; then two dispatcher processes side by side
 * (test/helpers/upgrade-scenario.ts). The rows dispatched before stay readable (effect status
 * finds them) and prunable.
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

describe('migration 021 with messages in every state', () => {
  it('settles an old lease into a batch, keeps old dispatched rows, and delivers everything in order', async () => {
    await runUpgradeScenario(db, receiver, {
      from: 20,
      leftInOutbox: 0,
      afterMigration: async ({ executor, first, inFlight, count }) => {
        // The old lease's messages went to a batch row; what version 20 dispatched is still
        // where it was.
        expect(
          await count(
            `SELECT coalesce(sum(message_count), 0)::int AS n FROM outbox_dispatched_batch_0`,
          ),
        ).toBe(5);
        expect(await count(`SELECT count(*)::int AS n FROM outbox_dispatched_0`)).toBe(10);
        expect(
          await count(
            `SELECT count(*)::int AS n FROM outbox_messages WHERE dispatched_at IS NOT NULL`,
          ),
        ).toBe(15);
        // Effect status finds both kinds, through the lookup functions.
        const status = await readEffectStatus(executor, {
          messageIds: [first[0]!.id, inFlight[0]!.id],
        });
        expect(status.effects.map((e) => e.state)).toEqual(['published', 'published']);
      },
    });
  }, 180_000);
});
