import { enqueue, type D1Db } from '../../../src/cloudflare/index.js';

/** Input of the `create_order` tool. `orderId` doubles as the idempotency key. */
export interface CreateOrderInput {
  orderId: string;
  customerEmail: string;
  lines: { sku: string; quantity: number; unitPriceCents: number }[];
}

/** What the tool answers the agent. */
export type CreateOrderResult =
  | { ok: true; orderId: string; deduped: boolean; messageIds: readonly string[] }
  | { ok: false; error: string };

function isInput(value: unknown): value is CreateOrderInput {
  const v = value as CreateOrderInput;
  return (
    typeof v?.orderId === 'string' &&
    v.orderId.length > 0 &&
    typeof v.customerEmail === 'string' &&
    Array.isArray(v.lines) &&
    v.lines.length > 0 &&
    v.lines.every(
      (l) =>
        typeof l?.sku === 'string' &&
        Number.isInteger(l.quantity) &&
        Number.isInteger(l.unitPriceCents),
    )
  );
}

/**
 * The `create_order` tool: writes the order, its lines and three outbox messages (charge,
 * receipt mail, status event) in ONE D1 batch — one transaction. It calls no external API: the
 * payment and the mail happen later, in the queue consumer, exactly once.
 *
 * A repeated call with the same `orderId` (an agent retrying after a timeout) writes nothing and
 * answers `deduped: true`: the orders primary key rejects the second batch as a whole.
 */
export async function createOrder(
  db: D1Db,
  input: unknown,
  traceHeaders: Record<string, string>,
): Promise<CreateOrderResult> {
  if (!isInput(input)) return { ok: false, error: 'orderId, customerEmail and lines are required' };
  const aggregateId = `order:${input.orderId}`;
  const totalCents = input.lines.reduce((sum, l) => sum + l.quantity * l.unitPriceCents, 0);
  const outbox = enqueue(
    db,
    [
      {
        topic: 'payment.charge',
        aggregateId,
        payload: { orderId: input.orderId, amountCents: totalCents },
      },
      {
        topic: 'mail.send',
        aggregateId,
        payload: { to: input.customerEmail, subject: `Order ${input.orderId} received` },
      },
      {
        topic: 'order.status',
        aggregateId,
        payload: { orderId: input.orderId, status: 'created' },
      },
    ],
    { headers: traceHeaders },
  );
  try {
    await db.batch([
      db
        .prepare(
          'INSERT INTO orders (id, customer_email, total_cents, created_at) VALUES (?, ?, ?, ?)',
        )
        .bind(input.orderId, input.customerEmail, totalCents, Date.now()),
      ...outbox,
      // Lines go last on purpose: a line the database rejects fails the batch after the order and
      // the outbox rows were written, and all of them roll back together.
      ...input.lines.map((l) =>
        db
          .prepare(
            'INSERT INTO order_lines (order_id, sku, quantity, unit_price_cents) VALUES (?, ?, ?, ?)',
          )
          .bind(input.orderId, l.sku, l.quantity, l.unitPriceCents),
      ),
    ]);
  } catch (error) {
    const existing = await db
      .prepare('SELECT 1 AS found FROM orders WHERE id = ?')
      .bind(input.orderId)
      .first();
    if (existing) return { ok: true, orderId: input.orderId, deduped: true, messageIds: [] };
    return { ok: false, error: error instanceof Error ? error.message : String(error) };
  }
  return { ok: true, orderId: input.orderId, deduped: false, messageIds: outbox.messageIds };
}
