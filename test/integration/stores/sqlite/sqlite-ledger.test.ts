import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createConsumer } from '../../../../src/consumer/index.js';
import {
  createSqliteLedger,
  migrateSqlite,
  openSqlite,
  type SqliteDatabase,
} from '../../../../src/stores/sqlite/index.js';
import { sqliteDriver } from '../../../helpers/libsql.js';
import { describeLedgerConformance } from '../../../conformance/ledger-conformance.js';
import { makeEnvelope } from '../../../fixtures/consumer/envelopes.js';

/** A fresh migrated file with a `charges` table. */
async function openFile() {
  const dir = await mkdtemp(join(tmpdir(), 'agent-outbox-sqlite-ledger-'));
  const db = await openSqlite(join(dir, 'agent.db'), { driver: sqliteDriver() });
  migrateSqlite(db);
  db.exec('CREATE TABLE charges (message_id TEXT NOT NULL, amount INTEGER NOT NULL)');
  return {
    db,
    close: async () => {
      db.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describeLedgerConformance<SqliteDatabase>({
  name: 'SQLite',
  available: true,
  async open() {
    const { db, close } = await openFile();
    return {
      ledger: createSqliteLedger(db),
      // Through the executor (tx, `?` parameters), in the handler's transaction.
      charge: async ({ tx }, messageId, amount) => {
        await tx.query('INSERT INTO charges (message_id, amount) VALUES (?, ?)', [
          messageId,
          amount,
        ]);
      },
      charges: async (messageId) =>
        (
          db.prepare('SELECT count(*) AS n FROM charges WHERE message_id = ?').get(messageId) as {
            n: number;
          }
        ).n,
      ledgerStates: async (consumer, messageId) =>
        (
          db
            .prepare('SELECT state FROM processed_messages WHERE consumer = ? AND message_id = ?')
            .all(consumer, messageId) as { state: string }[]
        ).map((r) => r.state),
      close,
    };
  },
});

describe('the SQLite consumer ledger', () => {
  it('hands the handler better-sqlite3 itself as trx, inside the transaction, and rolls it back on failure', async () => {
    const { db, close } = await openFile();
    try {
      const consumer = createConsumer({
        name: 'billing',
        mode: 'transactional',
        ledger: createSqliteLedger(db),
        handler: async (message, { trx }) => {
          expect(trx.inTransaction).toBe(true);
          trx.prepare('INSERT INTO charges (message_id, amount) VALUES (?, ?)').run(message.id, 1);
          throw new Error('after the effect');
        },
      });
      expect((await consumer.handle(makeEnvelope())).reason).toBe('handler-failed');
      expect(db.inTransaction).toBe(false);
      expect((db.prepare('SELECT count(*) AS n FROM charges').get() as { n: number }).n).toBe(0);
    } finally {
      await close();
    }
  });

  it('measures leases on its clock: held until the lease ends, then taken over', async () => {
    const { db, close } = await openFile();
    try {
      let clock = 1_000_000;
      const ledger = createSqliteLedger(db, { now: () => clock });
      expect(await ledger.claim('mailer', 'm-1', 10_000)).toMatchObject({ status: 'acquired' });
      expect(await ledger.claim('mailer', 'm-1', 10_000)).toEqual({
        status: 'held',
        remainingMs: 10_000,
      });
      clock += 10_001;
      expect(await ledger.claim('mailer', 'm-1', 10_000)).toMatchObject({
        status: 'acquired',
        takeover: true,
      });
    } finally {
      await close();
    }
  });
});
