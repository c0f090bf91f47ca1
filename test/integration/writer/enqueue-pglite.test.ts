import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPglite, migrate } from '../../../src/index.js';

let db: PGlite;
const outbox = createOutbox({ schema: 'agent' });

beforeAll(async () => {
  db = await PGlite.create();
  await migrate(fromPglite(db), { schema: 'agent', engine: 'claims' });
  await db.query('CREATE TABLE orders (id serial PRIMARY KEY, amount int NOT NULL)');
});
afterAll(() => db.close());

const count = async () =>
  (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM agent.outbox')).rows[0]!.n;

describe('enqueue with PGlite', () => {
  it('commits messages in a transaction', async () => {
    const result = await db.transaction(async (tx) => {
      const { rows } = await tx.query<{ id: number }>(
        'INSERT INTO orders (amount) VALUES (100) RETURNING id',
      );
      return outbox.enqueue(fromPglite(tx), [
        { topic: 'payment.charge', aggregateId: `order:${rows[0]!.id}`, payload: { amount: 100 } },
        { topic: 'mail.send', aggregateId: `order:${rows[0]!.id}`, payload: {} },
      ]);
    });
    expect(result.map((r) => r.sequence)).toEqual([1, 2]);
    expect(typeof result[0]!.id).toBe('string');
    expect(await count()).toBe(2);
  });

  it('contract (a): a throw after the second insert leaves no outbox row (G1)', async () => {
    const before = await count();
    await expect(
      db.transaction(async (tx) => {
        await tx.query('INSERT INTO orders (amount) VALUES (1)');
        await outbox.enqueue(fromPglite(tx), { topic: 'a', aggregateId: 'x', payload: 1 });
        await outbox.enqueue(fromPglite(tx), { topic: 'b', aggregateId: 'x', payload: 2 });
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await count()).toBe(before);
  });

  it('migrate is idempotent on PGlite too', async () => {
    const again = await migrate(fromPglite(db), { schema: 'agent', engine: 'claims' });
    expect(again.applied).toEqual([]);
  });
});
