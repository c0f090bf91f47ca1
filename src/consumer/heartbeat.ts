import type { ConsumerLedger } from './ledger.js';

/** A running lease renewal for one claim-first delivery. */
export interface Heartbeat {
  /** Aborted when the claim was lost to another process. */
  readonly signal: AbortSignal;
  /** Stops renewing; resolves with the claim's current fencing token. */
  stop(): Promise<string>;
}

/**
 * Renews a claim every third of its lease while the handler runs, so `leaseMs` only has to cover
 * a crashed process, not the slowest handler. A renewal that matches nothing means another
 * delivery took the message over: the signal aborts so the handler can stop early. A renewal
 * that fails (database briefly down) is retried at the next tick.
 */
export function startHeartbeat(options: {
  ledger: ConsumerLedger;
  consumer: string;
  messageId: string;
  token: string;
  leaseMs: number;
}): Heartbeat {
  const controller = new AbortController();
  let token = options.token;
  let inFlight: Promise<void> = Promise.resolve();
  const timer = setInterval(
    () => {
      inFlight = options.ledger
        .renew(options.consumer, options.messageId, token, options.leaseMs)
        .then((renewed) => {
          if (renewed) token = renewed;
          else {
            clearInterval(timer);
            controller.abort(new Error('claim lost: another delivery took this message over'));
          }
        })
        .catch(() => undefined);
    },
    Math.max(10, Math.floor(options.leaseMs / 3)),
  );
  timer.unref();
  return {
    signal: controller.signal,
    async stop() {
      clearInterval(timer);
      await inFlight;
      return token;
    },
  };
}
