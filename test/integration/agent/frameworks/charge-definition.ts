import type pg from 'pg';
import { z } from 'zod';
import {
  pgPoolTransactions,
  type OutboxToolDefinition,
} from '../../../../src/agent/framework-neutral.js';

/** The approval tests' tool (issue 42): writes a charge row and a `payment.charge` message. */
export type ChargeDefinition = OutboxToolDefinition<
  { order_id: z.ZodNumber; amount: z.ZodNumber },
  unknown,
  { chargeId: number }
>;

/** The `charge_order` definition on a pool: charges over 1000 are held by its policy. */
export function chargeDefinition(pool: pg.Pool): ChargeDefinition {
  return {
    name: 'charge_order',
    description: 'Charges an order; the card is charged afterwards, exactly once.',
    input: { order_id: z.number().int(), amount: z.number().int().positive() },
    transactions: pgPoolTransactions(pool) as ChargeDefinition['transactions'],
    approval: (_message, input) => input.amount > 1000,
    handler: async (input, { tx, outbox }) => {
      const { rows } = await tx.query<{ id: number }>(
        'INSERT INTO charges (order_id, amount) VALUES ($1, $2) RETURNING id',
        [input.order_id, input.amount],
      );
      await outbox.enqueue({
        topic: 'payment.charge',
        aggregateId: `order:${input.order_id}`,
        payload: { orderId: input.order_id, amount: input.amount },
      });
      return { chargeId: rows[0]!.id };
    },
  };
}
