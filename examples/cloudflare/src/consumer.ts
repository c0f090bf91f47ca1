import {
  createQueueConsumer,
  PermanentError,
  type D1Db,
  type QueueConsumer,
} from '../../../src/cloudflare/index.js';

/**
 * The example's consumer: performs each message's effect as D1 writes returned to the runtime,
 * which commits them in one batch with the ledger row — so a redelivered message finds itself in
 * the ledger and does nothing. Every topic of an order is ordered (strict): a strict check must
 * see every sequence of the aggregate, and this consumer subscribes to all of them.
 */
export function orderConsumer(db: D1Db, maxAttempts: number): QueueConsumer {
  return createQueueConsumer({
    db,
    name: 'orders-example',
    ordered: ['payment.charge', 'mail.send', 'order.status'],
    maxAttempts,
    handler: async (message, { traceparent }) => {
      const p = message.payload as Record<string, unknown>;
      switch (message.topic) {
        case 'payment.charge':
          return [
            db
              .prepare(
                'INSERT INTO payments (message_id, order_id, amount_cents, traceparent) VALUES (?, ?, ?, ?)',
              )
              .bind(message.id, String(p.orderId), Number(p.amountCents), traceparent ?? null),
          ];
        case 'mail.send':
          return [
            db
              .prepare(
                'INSERT INTO mailbox (message_id, to_address, subject, traceparent) VALUES (?, ?, ?, ?)',
              )
              .bind(message.id, String(p.to), String(p.subject), traceparent ?? null),
          ];
        case 'order.status':
          return [
            db
              .prepare('INSERT INTO order_events (order_id, sequence, status) VALUES (?, ?, ?)')
              .bind(String(p.orderId), message.sequence, String(p.status)),
          ];
        default:
          throw new PermanentError(`no effect for topic ${message.topic}`);
      }
    },
  });
}
