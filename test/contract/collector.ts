/** One message as a consumer received it from the broker. */
export interface Delivery {
  /** The body (UTF-8), which must be the envelope JSON. */
  body: string;
  /** The broker-native id (`Nats-Msg-Id`, AMQP `messageId`, `Idempotency-Key`, …), if any. */
  nativeId?: string;
}

/** Collects deliveries and lets a test wait for a condition on them. */
export interface Collector {
  readonly deliveries: Delivery[];
  push(delivery: Delivery): void;
  /**
   * Resolves once `condition(deliveries)` holds. Rejects after `failAfterMs` (default 20 s) with
   * `description`, so a lost message fails with a useful text instead of the test timeout; this
   * bounds a wait, it is not a performance assertion.
   */
  waitFor(
    condition: (deliveries: readonly Delivery[]) => boolean,
    description: string,
    failAfterMs?: number,
  ): Promise<void>;
}

export function createCollector(): Collector {
  const deliveries: Delivery[] = [];
  const waiters = new Set<() => void>();
  return {
    deliveries,
    push(delivery) {
      deliveries.push(delivery);
      for (const wake of [...waiters]) wake();
    },
    waitFor(condition, description, failAfterMs = 20_000) {
      if (condition(deliveries)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `gave up waiting for ${description}; received ${deliveries.length} deliveries`,
            ),
          );
        }, failAfterMs);
        const check = (): void => {
          if (!condition(deliveries)) return;
          clearTimeout(timer);
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
      });
    },
  };
}
