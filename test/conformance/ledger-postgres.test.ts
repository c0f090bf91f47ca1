import { createLedger, pgTransactions } from '../../src/consumer/index.js';
import type { PgQueryable } from '../../src/store/from-pg.js';
import { createTestDatabase } from '../helpers/database.js';
import { describeLedgerConformance } from './ledger-conformance.js';

/** The ledger conformance suite on Postgres: a database per test (test/helpers/database.ts). */
describeLedgerConformance<PgQueryable>({
  name: 'Postgres',
  available: true,
  async open() {
    const db = await createTestDatabase();
    await db.pool.query('CREATE TABLE charges (message_id text NOT NULL, amount int NOT NULL)');
    return {
      ledger: createLedger({ runner: pgTransactions(db.pool) }),
      charge: async ({ tx }, messageId, amount) => {
        await tx.query('INSERT INTO charges (message_id, amount) VALUES ($1, $2)', [
          messageId,
          amount,
        ]);
      },
      charges: async (messageId) =>
        (
          await db.pool.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM charges WHERE message_id = $1',
            [messageId],
          )
        ).rows[0]!.n,
      ledgerStates: async (consumer, messageId) =>
        (
          await db.pool.query<{ state: string }>(
            'SELECT state FROM processed_messages WHERE consumer = $1 AND message_id = $2',
            [consumer, messageId],
          )
        ).rows.map((r) => r.state),
      close: () => db.drop(),
    };
  },
});
