import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, type OutboxMessage } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

let db: TestDatabase;
const outbox = createOutbox();

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed;
  for (let i = out.length - 1; i > 0; i--) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

describe('writer lock order', () => {
  it('concurrent batches over the same aggregates in different orders never deadlock, and sequences stay dense', async () => {
    const aggregates = Array.from({ length: 8 }, (_, i) => `acct:${i}`);
    const clients = 4;
    const transactions = 60;
    const failures: string[] = [];
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        const client = await db.pool.connect();
        try {
          for (let t = 0; t < transactions; t++) {
            // Each transaction touches every aggregate, in its own order: taking the counters'
            // row locks in input order would deadlock two of these within a few rounds.
            const batch: OutboxMessage[] = shuffled(aggregates, c * 1000 + t).map((a) => ({
              topic: 'ledger.post',
              aggregateId: a,
              payload: { c, t },
            }));
            try {
              await client.query('BEGIN');
              await outbox.enqueue(fromPg(client), batch);
              await client.query('SELECT pg_sleep(0.001)');
              await client.query('COMMIT');
            } catch (error) {
              await client.query('ROLLBACK');
              failures.push((error as Error).message);
            }
          }
        } finally {
          client.release();
        }
      }),
    );
    expect(failures).toEqual([]);
    const { rows } = await db.pool.query<{ aggregate_id: string; n: number; max: number }>(
      `SELECT aggregate_id, count(*)::int AS n, max(sequence)::int AS max
       FROM outbox WHERE topic = 'ledger.post' GROUP BY aggregate_id ORDER BY aggregate_id`,
    );
    expect(rows).toHaveLength(aggregates.length);
    for (const row of rows) {
      expect(row.n).toBe(clients * transactions);
      expect(row.max).toBe(clients * transactions);
    }
  });
});
