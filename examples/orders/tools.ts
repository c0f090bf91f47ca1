import type { Transaction } from 'kysely';
import { z } from 'zod';
import { outboxTool, type TransactionRunner } from '../../src/agent/index.js';
import type { OrdersDatabase } from './schema.js';

/** Topics the example's tools write and its consumers read. */
export const TOPIC = {
  charge: 'payment.charge',
  refund: 'payment.refund',
  mail: 'mail.send',
} as const;

/**
 * Refunds above this amount wait for a person's approval (issue 20): `refund_order`'s approval
 * policy holds the `payment.refund` message until someone runs `outbox approve`.
 */
export const REFUND_APPROVAL_THRESHOLD = 10_000;

/** Lets tests and the demo make a tool throw after it wrote everything (the rollback path). */
export type FailureInjector = (tool: 'create_order' | 'refund_order', input: unknown) => boolean;

/** What the order tools need. */
export interface OrderToolsOptions {
  transactions: TransactionRunner<Transaction<OrdersDatabase>>;
  injectFailure?: FailureInjector;
}

function failIfInjected(
  options: OrderToolsOptions,
  tool: 'create_order' | 'refund_order',
  input: unknown,
) {
  if (options.injectFailure?.(tool, input)) {
    throw new Error(`${tool} failed after writing its rows and messages (injected failure)`);
  }
}

/**
 * `create_order`: inserts the order and queues the charge and the confirmation mail — nothing
 * here talks to the payment provider or the mail server; consumers do that after commit.
 */
export function createOrderTool(options: OrderToolsOptions) {
  return outboxTool({
    name: 'create_order',
    description:
      'Creates an order for a user. The card is charged and a confirmation mail is sent afterwards, once each.',
    input: {
      user_id: z.string().min(1).max(100),
      email: z.email(),
      amount: z.number().int().positive().max(10_000_000),
      currency: z.enum(['JPY', 'USD']),
    },
    transactions: options.transactions,
    handler: async (input, { trx, outbox, ctx }) => {
      const order = await trx
        .insertInto('orders')
        .values({ ...input, idempotency_key: ctx.idempotencyKey })
        .returning(['id', 'amount', 'currency'])
        .executeTakeFirstOrThrow();
      const aggregateId = `order:${order.id}`;
      await outbox.enqueue([
        {
          topic: TOPIC.charge,
          aggregateId,
          payload: {
            orderId: order.id,
            userId: input.user_id,
            amount: order.amount,
            currency: order.currency,
          },
        },
        {
          topic: TOPIC.mail,
          aggregateId,
          payload: {
            to: input.email,
            template: 'order-received',
            orderId: order.id,
            amount: order.amount,
            currency: order.currency,
          },
        },
      ]);
      failIfInjected(options, 'create_order', input);
      return { orderId: order.id, status: 'placed' };
    },
    summarize: (result) => `Order ${result.orderId} was created.`,
  });
}

/**
 * `refund_order`: marks a placed order refunded and queues the refund and its notice mail. A
 * refund above {@link REFUND_APPROVAL_THRESHOLD} is held for a person's approval; the notice mail
 * is ordered behind it in the order's aggregate (`ordered: true`, though `mail.*` is unordered
 * otherwise), so "we refunded" goes out only after the refund was approved and sent.
 */
export function refundOrderTool(options: OrderToolsOptions) {
  return outboxTool({
    name: 'refund_order',
    description:
      'Refunds a placed order in full. The money is returned and the user notified afterwards.',
    input: {
      order_id: z.number().int().positive(),
      reason: z.string().max(500).optional(),
    },
    transactions: options.transactions,
    approval: (message) =>
      message.topic === TOPIC.refund &&
      (message.payload as { amount: number }).amount > REFUND_APPROVAL_THRESHOLD,
    handler: async (input, { trx, outbox }) => {
      // FOR UPDATE: two refunds of one order must not both see status 'placed'.
      const order = await trx
        .selectFrom('orders')
        .select(['id', 'email', 'amount', 'currency', 'status'])
        .where('id', '=', input.order_id)
        .forUpdate()
        .executeTakeFirst();
      if (!order) throw new Error(`order ${input.order_id} does not exist`);
      if (order.status === 'refunded') throw new Error(`order ${order.id} is already refunded`);
      await trx
        .updateTable('orders')
        .set({ status: 'refunded', refunded_at: new Date() })
        .where('id', '=', order.id)
        .execute();
      const aggregateId = `order:${order.id}`;
      await outbox.enqueue([
        {
          topic: TOPIC.refund,
          aggregateId,
          payload: {
            orderId: order.id,
            amount: order.amount,
            currency: order.currency,
            reason: input.reason ?? null,
          },
        },
        {
          topic: TOPIC.mail,
          aggregateId,
          ordered: true,
          payload: {
            to: order.email,
            template: 'order-refunded',
            orderId: order.id,
            amount: order.amount,
            currency: order.currency,
          },
        },
      ]);
      failIfInjected(options, 'refund_order', input);
      return { orderId: order.id, status: 'refunded' };
    },
    summarize: (result) => `Order ${result.orderId} was refunded.`,
  });
}
