import { context } from '@opentelemetry/api';
import { backoffDelayMs, type BackoffOptions } from '../core/backoff.js';
import { EnvelopeError, parseEnvelope, type Envelope } from '../publishers/envelope.js';
import { ack, dead, retry, type DeliveryResult } from './delivery-result.js';
import { DeferError, PermanentError, safeErrorText } from './errors.js';
import type { ClaimFirstContext, Handler, TransactionalContext } from './handler.js';
import type { ConsumerLedger } from './ledger.js';
import {
  orderCheckFor,
  orderingResult,
  type OrderCheck,
  type OrderingOptions,
} from './ordering.js';
import { startHeartbeat } from './heartbeat.js';
import { endProcessSpan, startProcessSpan } from './process-span.js';

/** Options shared by both modes of {@link createConsumer}. */
export interface ConsumerBaseOptions {
  /**
   * Stable consumer name: the ledger key with the message id. Two processes of the same
   * service share it (and share the work); two services doing different effects must not.
   */
  name: string;
  /** Where effects are recorded; see `createLedger`. */
  ledger: ConsumerLedger;
  /** Ordered topics and their sequence check. Default: no topic is ordered. */
  ordering?: OrderingOptions;
  /**
   * Backoff after a handler failure, by delivery attempt. Default base 1 s, max 60 s, jitter
   * 500 ms — shorter than the dispatcher's, because the message is already at the consumer.
   */
  retry?: Partial<BackoffOptions>;
  /**
   * Dead-letter a message whose handler failed on this delivery attempt or later. Needs a
   * binding that reports attempts (NATS, the in-memory and HTTP bindings with a header).
   * Default: never — note that broker attempt counts include deferrals.
   */
  maxAttempts?: number;
  /** Observer of every result (logging, metrics). Its errors are ignored. */
  onResult?: (result: DeliveryResult, message: Envelope | undefined) => void;
}

/**
 * A consumer whose effect is a write in the same database as the ledger. `Trx` is the ledger
 * runner's transaction object, handed to the handler as `trx` (an ORM's `tx`).
 */
export interface TransactionalConsumerOptions<Trx = unknown> extends ConsumerBaseOptions {
  mode: 'transactional';
  ledger: ConsumerLedger<Trx>;
  handler: Handler<TransactionalContext<Trx>>;
}

/** A consumer whose effect is an external call (payment, email, LLM API). */
export interface ClaimFirstConsumerOptions extends ConsumerBaseOptions {
  mode: 'claim-first';
  handler: Handler<ClaimFirstContext>;
  /**
   * How long a claim protects a message from other deliveries, in ms. Renewed every third of it
   * while the handler runs, so it only has to outlive a crashed process, not a slow handler.
   * Default 60 000.
   */
  leaseMs?: number;
}

/** Options of {@link createConsumer}. */
export type ConsumerOptions<Trx = unknown> =
  TransactionalConsumerOptions<Trx> | ClaimFirstConsumerOptions;

/** Extra facts a binding knows about a delivery. */
export interface DeliveryMeta {
  /** Delivery attempt, 1 for the first. */
  attempt?: number;
  /**
   * The broker the delivery came from, as OpenTelemetry's `messaging.system` on the delivery's
   * `process` span (`nats`, `rabbitmq`, `redis`, `http`, `memory`; the bindings set it).
   * Default `agent_outbox`.
   */
  messagingSystem?: string;
}

/** An idempotent consumer; feed it deliveries from a broker binding. */
export interface Consumer {
  readonly name: string;
  /**
   * Handles one delivery — a parsed envelope, or the raw body (string/bytes), which is parsed
   * here so a malformed one ends as `dead` — and says what the binding must do. Never throws.
   * Records a `process` span (OpenTelemetry, a no-op without an SDK) parented on the message's
   * `traceparent`; the handler runs in it.
   */
  handle(delivery: Envelope | string | Uint8Array, meta?: DeliveryMeta): Promise<DeliveryResult>;
}

const DEFAULT_RETRY: BackoffOptions = { baseMs: 1_000, maxMs: 60_000, jitterMs: 500 };
const DEFAULT_LEASE_MS = 60_000;
const DEFAULT_EARLY_RETRY_MS = 1_000;

/** Marks an error thrown by the handler, as opposed to one from the ledger. */
class HandlerFailure {
  constructor(readonly cause: unknown) {}
}

/**
 * Creates an idempotent consumer (SPEC G5): each message's effect happens once per consumer
 * name, however often the broker delivers it.
 *
 * @example
 * ```ts
 * const consumer = createConsumer({
 *   name: 'mailer',
 *   mode: 'claim-first',
 *   ledger: createLedger({ runner: pgTransactions(pool) }),
 *   handler: async (message, { idempotencyKey }) => {
 *     await mail.send(message.payload, { idempotencyKey });
 *   },
 * });
 * const result = await consumer.handle(body); // { action: 'ack', reason: 'processed' }
 * ```
 */
export function createConsumer<Trx = unknown>(options: ConsumerOptions<Trx>): Consumer {
  if (typeof options.name !== 'string' || options.name.length === 0 || options.name.length > 255)
    throw new TypeError('createConsumer: name must be a string of 1-255 characters');
  const backoff: BackoffOptions = { ...DEFAULT_RETRY, ...options.retry };
  const earlyRetryMs = options.ordering?.earlyRetryDelayMs ?? DEFAULT_EARLY_RETRY_MS;
  const { name, ledger } = options;

  const failed = (error: unknown, message: Envelope, attempt: number | undefined) => {
    const cause = error instanceof HandlerFailure ? error.cause : error;
    const detail = safeErrorText(cause);
    if (!(error instanceof HandlerFailure)) {
      return retry('ledger-failed', backoffDelayMs(attempt ?? 1, backoff), message.id, detail);
    }
    if (cause instanceof PermanentError) return dead('permanent-failure', message.id, detail);
    if (cause instanceof DeferError) return retry('deferred', cause.delayMs, message.id, detail);
    if (options.maxAttempts !== undefined && (attempt ?? 1) >= options.maxAttempts)
      return dead('max-attempts', message.id, detail);
    return retry('handler-failed', backoffDelayMs(attempt ?? 1, backoff), message.id, detail);
  };

  const orderResult = (check: OrderCheck, last: number, message: Envelope) =>
    orderingResult(check, last, message, earlyRetryMs);

  const transactional =
    (transactions: ConsumerLedger<Trx>, handler: Handler<TransactionalContext<Trx>>) =>
    async (message: Envelope, attempt: number | undefined): Promise<DeliveryResult> => {
      const check = orderCheckFor(options.ordering, message.topic);
      try {
        return await transactions.transaction(async (tx) => {
          // Position before ledger, always: one lock order, so two deliveries cannot deadlock.
          if (check) {
            const last = await tx.lockPosition(name, message.aggregateId);
            const early = orderResult(check, last, message);
            if (early) return early;
          }
          if (!(await tx.recordDone(name, message.id))) return ack('duplicate', message.id);
          try {
            await handler(message, {
              tx: tx.executor,
              trx: tx.trx,
              idempotencyKey: message.id,
              attempt,
              signal: new AbortController().signal,
            });
          } catch (error) {
            throw new HandlerFailure(error);
          }
          if (check) await tx.advancePosition(name, message.aggregateId, message.sequence);
          return ack('processed', message.id);
        });
      } catch (error) {
        return failed(error, message, attempt);
      }
    };

  const claimFirst =
    (handler: Handler<ClaimFirstContext>, leaseMs: number) =>
    async (message: Envelope, attempt: number | undefined): Promise<DeliveryResult> => {
      const check = orderCheckFor(options.ordering, message.topic);
      let claim;
      try {
        if (check) {
          const early = orderResult(
            check,
            await ledger.position(name, message.aggregateId),
            message,
          );
          if (early) return early;
        }
        claim = await ledger.claim(name, message.id, leaseMs);
      } catch (error) {
        return failed(error, message, attempt);
      }
      if (claim.status === 'done') return ack('duplicate', message.id);
      if (claim.status === 'held') {
        // Come back just after the holder's lease would end: by then it is done or lost.
        return retry('claimed-elsewhere', claim.remainingMs + 100, message.id);
      }
      const heartbeat = startHeartbeat({
        ledger,
        consumer: name,
        messageId: message.id,
        token: claim.token,
        leaseMs,
      });
      try {
        await handler(message, {
          idempotencyKey: message.id,
          attempt,
          signal: heartbeat.signal,
          takeover: claim.takeover,
        });
      } catch (error) {
        const token = await heartbeat.stop();
        // The effect may or may not have happened; the idempotency key covers both, so free the
        // message for the retry instead of making it wait out the lease.
        await ledger.release(name, message.id, token).catch(() => undefined);
        return failed(new HandlerFailure(error), message, attempt);
      }
      await heartbeat.stop();
      try {
        await ledger.complete(
          name,
          message.id,
          check ? { aggregateId: message.aggregateId, sequence: message.sequence } : undefined,
        );
      } catch (error) {
        // The claim stays: after its lease the redelivery takes over and the API dedupes.
        return failed(error, message, attempt);
      }
      return ack('processed', message.id);
    };

  const run =
    options.mode === 'transactional'
      ? transactional(options.ledger, options.handler)
      : claimFirst(options.handler, options.leaseMs ?? DEFAULT_LEASE_MS);

  return {
    name,
    async handle(delivery, meta = {}) {
      let message: Envelope | undefined;
      let result: DeliveryResult;
      try {
        message = parseEnvelope(
          typeof delivery === 'string' || delivery instanceof Uint8Array
            ? delivery
            : JSON.stringify(delivery),
        );
      } catch (error) {
        const detail = error instanceof EnvelopeError ? error.message : safeErrorText(error);
        result = dead('poison', undefined, detail);
      }
      const traced = startProcessSpan(name, options.mode, message, meta);
      if (message) {
        const parsed = message;
        result = await context.with(traced.context, () => run(parsed, meta.attempt));
      }
      endProcessSpan(traced.span, result!);
      try {
        options.onResult?.(result!, message);
      } catch {
        // An observer must not turn a recorded effect into a redelivery.
      }
      return result!;
    },
  };
}
