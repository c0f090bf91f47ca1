import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, migrate } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * Message ids are unique across outboxes, not only within one: a consumer that serves several
 * tenants' databases (or schemas, a fleet) keeps one ledger keyed by message id, and a second
 * message with an id it has seen is dropped as a duplicate (an effect lost). An id derived from
 * where the row lives (lane, row id, the millisecond) repeats between two outboxes written alike
 * at the same moment: such a design lost 3 of 480 messages in the lanes fleet test
 * (cli-dispatch-fleet-lanes) and was reverted in session 26.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
  for (const schema of ['tenant_a', 'tenant_b']) await migrate(fromPg(db.pool), { schema });
});
afterAll(() => db?.drop());

describe('lanes engine: message ids', () => {
  it('are distinct between two schemas written alike at the same moments', async () => {
    const writers = ['tenant_a', 'tenant_b'].map((schema) =>
      createOutbox({ engine: 'lanes', schema }),
    );
    const ids: string[] = [];
    for (let round = 0; round < 50; round++)
      await Promise.all(
        writers.map((outbox) =>
          inTransaction(db.pool, async (client) => {
            const written = await outbox.enqueue(
              fromPg(client),
              Array.from({ length: 4 }, (_, i) => ({
                topic: 'payment.charge',
                aggregateId: `agg-${i}`,
                payload: { round, i },
              })),
            );
            ids.push(...written.map((m) => m.messageId));
          }),
        ),
      );
    expect(ids).toHaveLength(400);
    expect(new Set(ids).size).toBe(400);
  });
});
