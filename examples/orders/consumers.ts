import type { Transaction } from 'kysely';
import type { TransactionRunner } from '../../src/agent/index.js';
import type { OutgoingMessage } from '../../src/index.js';
import type { Mailbox } from './mailbox.js';
import type { FakePaymentProvider } from './payment-provider.js';
import type { OrdersDatabase } from './schema.js';
import { TOPIC } from './tools.js';

/** What one delivery did. */
export interface Delivery {
  consumer: string;
  messageId: string;
  /** `performed`: the effect ran now; `duplicate`: the ledger already had it; `ignored`: no consumer. */
  outcome: 'performed' | 'duplicate' | 'ignored';
}

/** Routes delivered messages to the example's consumers. */
export interface OrdersConsumers {
  /**
   * Performs the message's effect unless this consumer already did. Throws when the effect fails
   * (nothing is recorded then, so a redelivery tries again).
   */
  deliver(message: OutgoingMessage): Promise<Delivery>;
}

interface OrderPayload {
  orderId: number;
  amount: number;
  currency: string;
  to?: string;
  template?: string;
}

/**
 * The example's stopgap ledger until the consumer runtime lands: per message, in ONE transaction,
 * claim `(consumer, message_id)` in `processed_messages`, perform the effect, commit. A duplicate
 * finds the claim and does nothing. The effects are external (provider, mailbox), so a crash
 * between effect and commit can repeat the call: both take the message id as their idempotency
 * key and turn that repeat into a no-op.
 */
export function createOrdersConsumers(deps: {
  transactions: TransactionRunner<Transaction<OrdersDatabase>>;
  provider: FakePaymentProvider;
  mailbox: Mailbox;
}): OrdersConsumers {
  const effects: Record<
    string,
    { consumer: string; perform: (message: OutgoingMessage) => Promise<void> }
  > = {
    [TOPIC.charge]: {
      consumer: 'payments',
      perform: async (message) => {
        const p = message.payload as unknown as OrderPayload;
        deps.provider.charge({
          orderId: p.orderId,
          amount: p.amount,
          currency: p.currency,
          idempotencyKey: message.id,
        });
      },
    },
    [TOPIC.refund]: {
      consumer: 'payments',
      perform: async (message) => {
        const p = message.payload as unknown as OrderPayload;
        deps.provider.refund({
          orderId: p.orderId,
          amount: p.amount,
          currency: p.currency,
          idempotencyKey: message.id,
        });
      },
    },
    [TOPIC.mail]: {
      consumer: 'mailer',
      perform: async (message) => {
        const p = message.payload as unknown as OrderPayload;
        const refunded = p.template === 'order-refunded';
        await deps.mailbox.deliver(message.id, {
          to: p.to ?? '',
          subject: refunded ? `Order ${p.orderId} refunded` : `Order ${p.orderId} received`,
          body: `${refunded ? 'We refunded' : 'We will charge'} ${p.amount} ${p.currency} for order ${p.orderId}.`,
        });
      },
    },
  };

  return {
    async deliver(message) {
      const effect = effects[message.topic];
      if (!effect) return { consumer: 'none', messageId: message.id, outcome: 'ignored' };
      const outcome = await deps.transactions.run(async (_tx, trx) => {
        const claimed = await trx
          .insertInto('processed_messages')
          .values({ consumer: effect.consumer, message_id: message.id })
          .onConflict((oc) => oc.columns(['consumer', 'message_id']).doNothing())
          .returning('message_id')
          .executeTakeFirst();
        if (!claimed) return 'duplicate' as const;
        await effect.perform(message);
        return 'performed' as const;
      });
      return { consumer: effect.consumer, messageId: message.id, outcome };
    },
  };
}
