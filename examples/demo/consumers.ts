/**
 * The demo's consumers, on the consumer runtime (`src/consumer`, SPEC §4.7) rather than the
 * orders example's stopgap ledger: both effects are external (a payment provider, a mailbox
 * directory), so both use claim-first mode — claim (consumer, message id) in
 * `processed_messages`, perform the effect with the message id as its idempotency key, mark done.
 */
import type { Mailbox, FakePaymentProvider } from '../orders/index.js';
import { TOPIC } from '../orders/index.js';
import { createConsumer, type Consumer, type ConsumerLedger } from '../../src/consumer/index.js';
import type { DeliveryResult } from '../../src/consumer/index.js';
import type { Envelope } from '../../src/publishers/envelope.js';

/** Payload fields the order tools write (see examples/orders/tools.ts). */
interface OrderPayload {
  orderId: number;
  amount: number;
  currency: string;
  to?: string;
  template?: string;
}

/** The two consumers and the topics each one reads. */
export interface DemoConsumers {
  payments: { consumer: Consumer; topics: readonly string[] };
  mailer: { consumer: Consumer; topics: readonly string[] };
}

/**
 * Builds the consumers. `retryBaseMs` keeps the runtime's handler-failure backoff short for the
 * demo (a refund delivered before its charge finished is retried, not lost).
 */
export function createDemoConsumers(deps: {
  ledger: ConsumerLedger;
  provider: FakePaymentProvider;
  mailbox: Mailbox;
  retryBaseMs?: number;
  onResult?: (consumer: string, result: DeliveryResult, message: Envelope | undefined) => void;
}): DemoConsumers {
  const retry = { baseMs: deps.retryBaseMs ?? 50, maxMs: 1_000, jitterMs: 20 };
  const payments = createConsumer({
    name: 'payments',
    mode: 'claim-first',
    ledger: deps.ledger,
    retry,
    onResult: (result, message) => deps.onResult?.('payments', result, message),
    handler: async (message, { idempotencyKey }) => {
      const p = message.payload as unknown as OrderPayload;
      const request = {
        orderId: p.orderId,
        amount: p.amount,
        currency: p.currency,
        idempotencyKey,
      };
      if (message.topic === TOPIC.charge) deps.provider.charge(request);
      else if (message.topic === TOPIC.refund) deps.provider.refund(request);
      else throw new Error(`payments cannot handle topic ${message.topic}`);
    },
  });
  const mailer = createConsumer({
    name: 'mailer',
    mode: 'claim-first',
    ledger: deps.ledger,
    retry,
    onResult: (result, message) => deps.onResult?.('mailer', result, message),
    handler: async (message, { idempotencyKey }) => {
      const p = message.payload as unknown as OrderPayload;
      const refunded = p.template === 'order-refunded';
      await deps.mailbox.deliver(idempotencyKey, {
        to: p.to ?? '',
        subject: refunded ? `Order ${p.orderId} refunded` : `Order ${p.orderId} received`,
        body: `${refunded ? 'We refunded' : 'We will charge'} ${p.amount} ${p.currency} for order ${p.orderId}.`,
      });
    },
  });
  return {
    payments: { consumer: payments, topics: [TOPIC.charge, TOPIC.refund] },
    mailer: { consumer: mailer, topics: [TOPIC.mail] },
  };
}
