/**
 * The quick-start demo: an embedded Postgres (PGlite, in-process), the outbox schema, and an
 * "agent tool" that writes an order and its side effects in one transaction — twice, the second
 * time failing midway to show that nothing half-written survives.
 */
import { PGlite } from '@electric-sql/pglite';
import { createOutbox, fromPglite, migrate } from '../../src/index.js';

const db = await PGlite.create();
const migrated = await migrate(fromPglite(db));
console.log(`schema ready (version ${migrated.version}) on embedded PGlite`);
await db.query('CREATE TABLE orders (id serial PRIMARY KEY, user_id text NOT NULL, amount int NOT NULL)');

const outbox = createOutbox();

async function createOrderTool(userId: string, amount: number, failMidway: boolean) {
  return db.transaction(async (tx) => {
    const { rows } = await tx.query<{ id: number }>('INSERT INTO orders (user_id, amount) VALUES ($1, $2) RETURNING id', [userId, amount]);
    const orderId = rows[0]!.id;
    const written = await outbox.enqueue(fromPglite(tx), [
      { topic: 'payment.charge', aggregateId: `order:${orderId}`, payload: { orderId, amount, currency: 'JPY' } },
      { topic: 'mail.send', aggregateId: `order:${orderId}`, payload: { to: userId, template: 'order-received' } },
    ]);
    if (failMidway) throw new Error('simulated crash after the outbox insert');
    return { orderId, written };
  });
}

const ok = await createOrderTool('alice@example.com', 1200, false);
console.log(`create_order committed order ${ok.orderId} with ${ok.written.length} outbox messages`);
await createOrderTool('bob@example.com', 900, true).catch((error: Error) => console.log(`create_order failed as scripted: ${error.message}`));

const orders = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
const pending = await db.query<{ topic: string; aggregate_id: string; sequence: number }>(
  'SELECT topic, aggregate_id, sequence FROM outbox WHERE dispatched_at IS NULL ORDER BY aggregate_id, sequence',
);
console.log(`orders: ${orders.rows[0]!.n}, pending outbox messages: ${pending.rows.length}`);
for (const row of pending.rows) console.log(`  ${row.aggregate_id} #${row.sequence} ${row.topic}`);
console.log('The failed call left neither an order nor a message behind (G1).');
await db.close();
