/** A charge or refund as the fake provider recorded it. */
export interface PaymentRecord {
  id: string;
  kind: 'charge' | 'refund';
  orderId: number;
  amount: number;
  currency: string;
  idempotencyKey: string;
}

/**
 * Stands in for Stripe & co.: keeps charges and refunds in memory, keyed by the caller's
 * idempotency key exactly like those APIs do — a repeated key returns the first record instead
 * of charging again. The consumers pass the outbox message id as the key, so even a redelivery
 * that slips past the ledger (crash between the provider call and the ledger commit) charges once.
 */
export class FakePaymentProvider {
  /** Every record, keyed by idempotency key. */
  readonly records = new Map<string, PaymentRecord>();
  /** Calls that were answered from an earlier record. */
  replays = 0;
  #next = 1;

  /** Charges the order's amount. */
  charge(request: Omit<PaymentRecord, 'id' | 'kind'>): PaymentRecord {
    return this.#record('charge', request);
  }

  /** Refunds a charged order; throws when the order was never charged (retry after the charge). */
  refund(request: Omit<PaymentRecord, 'id' | 'kind'>): PaymentRecord {
    const charged = this.list('charge').some((r) => r.orderId === request.orderId);
    if (!charged && !this.records.has(request.idempotencyKey)) {
      throw new Error(`no charge for order ${request.orderId} to refund`);
    }
    return this.#record('refund', request);
  }

  /** Records of one kind, in creation order. */
  list(kind: PaymentRecord['kind']): PaymentRecord[] {
    return [...this.records.values()].filter((r) => r.kind === kind);
  }

  #record(kind: PaymentRecord['kind'], request: Omit<PaymentRecord, 'id' | 'kind'>): PaymentRecord {
    const existing = this.records.get(request.idempotencyKey);
    if (existing) {
      this.replays++;
      return existing;
    }
    const record: PaymentRecord = {
      id: `${kind === 'charge' ? 'ch' : 're'}_${this.#next++}`,
      kind,
      ...request,
    };
    this.records.set(request.idempotencyKey, record);
    return record;
  }
}
