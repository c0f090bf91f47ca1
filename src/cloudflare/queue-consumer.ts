import { backoffDelayMs, type BackoffOptions } from '../core/backoff.js';
import { redactSecrets } from '../core/redact.js';
import { ack, dead, retry, type DeliveryResult } from '../consumer/delivery-result.js';
import { DeferError, PermanentError, safeErrorText } from '../consumer/errors.js';
import { orderCheckFor, orderingResult, type OrderingOptions } from '../consumer/ordering.js';
import { EnvelopeError, parseEnvelope, type Envelope } from '../publishers/envelope.js';
import {
  advancePositionSql,
  insertDeadLetterSql,
  ledgerStateSql,
  readPositionSql,
  recordDoneSql,
} from '../sql/sqlite/consumer.js';
import type { D1Db, D1Statement, QueueBatch, QueueDelivery } from './d1-types.js';

/** What a D1 queue handler receives besides the message. */
export interface D1HandlerContext {
  /** The D1 binding, for reads. Return writes instead of running them (see {@link D1Handler}). */
  db: D1Db;
  /**
   * The message id. Pass it to external APIs as their idempotency key: an effect performed
   * outside D1 is not in the ledger's batch, so a crash after it and before the ledger write
   * means a redelivery calls the API again — the key makes that call a no-op.
   */
  idempotencyKey: string;
  /** Delivery attempt from the queue, 1 for the first. */
  attempt: number;
  /** W3C `traceparent` carried from the edge in the envelope headers, when there is one. */
  traceparent: string | undefined;
}

/**
 * Performs one message's effect. Return the D1 statements that ARE the effect (or record it):
 * they are committed in one batch with the ledger row, so effect and record commit together or
 * not at all. Throw to have the message retried (`PermanentError`: dead-lettered; `DeferError`:
 * retried after its delay).
 */
export type D1Handler = (
  message: Envelope,
  context: D1HandlerContext,
) => Promise<readonly D1Statement[] | void>;

/** Options of {@link createQueueConsumer}. */
export interface QueueConsumerOptions {
  /** The D1 binding holding `processed_messages`, `consumer_positions`, `consumer_dead_letters`. */
  db: D1Db;
  /** Stable consumer name: the ledger key together with the message id. */
  name: string;
  handler: D1Handler;
  /**
   * Ordered topics and their sequence check (`monotonic` or `strict`, see the consumer runtime).
   * Queues has no partition key, so this is the only place order is restored. A bare array means
   * those topics with `strict`: a message that arrives before its predecessor is retried with
   * `ordered.earlyRetryDelayMs` (default 1 s).
   */
  ordered?: OrderingOptions | readonly string[];
  /** Backoff after a handler failure, by attempt. Default base 1 s, max 60 s, jitter 500 ms. */
  retry?: Partial<BackoffOptions>;
  /**
   * On this delivery attempt or later, a failing (or still early) message is recorded in
   * `consumer_dead_letters` and acknowledged instead of retried. Set it to the queue's
   * `max_retries` + 1: Queues deletes a message that exhausts its retries when no dead-letter
   * queue is configured, and this records it in D1 first. Default 4 (Queues' default
   * `max_retries` is 3).
   */
  maxAttempts?: number;
  /** Observer of every result (logging, metrics). Its errors are ignored. */
  onResult?: (result: DeliveryResult, message: Envelope | undefined) => void;
  /** Clock in ms since the epoch. Default `Date.now`. */
  now?: () => number;
}

/** A queue consumer for a Worker's `queue(batch, env)` handler. */
export interface QueueConsumer {
  readonly name: string;
  /** Handles every message of the batch, acknowledging or retrying each one explicitly. */
  handleBatch(batch: QueueBatch): Promise<DeliveryResult[]>;
  /** Handles one delivery and settles it (`ack()` / `retry()`). Never throws. */
  handle(delivery: QueueDelivery): Promise<DeliveryResult>;
}

const DEFAULT_RETRY: BackoffOptions = { baseMs: 1_000, maxMs: 60_000, jitterMs: 500 };
/** Queues' `delaySeconds` ceiling (12 hours). */
const MAX_DELAY_SECONDS = 43_200;

class HandlerFailure {
  constructor(readonly cause: unknown) {}
}

function bodyText(body: unknown): string {
  if (typeof body === 'string') return body;
  if (body instanceof ArrayBuffer) return new TextDecoder().decode(body);
  if (body instanceof Uint8Array) return new TextDecoder().decode(body);
  return JSON.stringify(body) ?? String(body);
}

/**
 * Creates an idempotent, order-restoring consumer over a D1 ledger (SPEC G5 and G4 on Queues).
 * Per delivery: parse the envelope; already in the ledger → ack; ordered topic → compare its
 * sequence with the consumer's position (stale → ack, early → `retry({ delaySeconds })`); run the
 * handler; commit ledger row + position + the handler's statements in one batch; only then
 * `ack()`. A failure is `retry()`ed with backoff — never swallowed.
 *
 * Poison bodies (not an envelope) are recorded in `consumer_dead_letters` and acknowledged:
 * retrying cannot fix them, and recording them in D1 keeps them visible even when the queue has
 * no dead-letter queue. If that record cannot be written, the message is retried instead.
 *
 * @example
 * ```ts
 * const consumer = createQueueConsumer({
 *   db: env.DB,
 *   name: 'mailer',
 *   ordered: ['order.status'],
 *   handler: async (message, { db }) => [
 *     db.prepare('INSERT INTO sent_mail (message_id, body) VALUES (?, ?)').bind(message.id, '...'),
 *   ],
 * });
 * await consumer.handleBatch(batch);
 * ```
 */
export function createQueueConsumer(options: QueueConsumerOptions): QueueConsumer {
  const { db, name, handler } = options;
  if (typeof name !== 'string' || name.length === 0 || name.length > 255)
    throw new TypeError('createQueueConsumer: name must be a string of 1-255 characters');
  const ordering: OrderingOptions | undefined = Array.isArray(options.ordered)
    ? { topics: options.ordered, check: 'strict' }
    : (options.ordered as OrderingOptions | undefined);
  const earlyRetryMs = ordering?.earlyRetryDelayMs ?? 1_000;
  const backoff: BackoffOptions = { ...DEFAULT_RETRY, ...options.retry };
  const maxAttempts = options.maxAttempts ?? 4;
  const now = options.now ?? Date.now;

  const isDone = async (messageId: string) =>
    (await db.prepare(ledgerStateSql).bind(name, messageId).first<{ state: string }>())?.state ===
    'done';
  const position = async (aggregateId: string) =>
    Number(
      (await db.prepare(readPositionSql).bind(name, aggregateId).first<{ last_sequence: number }>())
        ?.last_sequence ?? 0,
    );

  /** The ordering verdict as a result, or undefined to go ahead. */
  const orderResult = (message: Envelope, last: number): DeliveryResult | undefined => {
    const check = orderCheckFor(ordering, message.topic);
    return check ? orderingResult(check, last, message, earlyRetryMs) : undefined;
  };

  const failed = (error: unknown, message: Envelope, attempt: number): DeliveryResult => {
    const cause = error instanceof HandlerFailure ? error.cause : error;
    const detail = safeErrorText(cause);
    if (!(error instanceof HandlerFailure))
      return retry('ledger-failed', backoffDelayMs(attempt, backoff), message.id, detail);
    if (cause instanceof PermanentError) return dead('permanent-failure', message.id, detail);
    if (cause instanceof DeferError) return retry('deferred', cause.delayMs, message.id, detail);
    return retry('handler-failed', backoffDelayMs(attempt, backoff), message.id, detail);
  };

  const process = async (message: Envelope, attempt: number): Promise<DeliveryResult> => {
    const ordered = orderCheckFor(ordering, message.topic) !== undefined;
    try {
      if (await isDone(message.id)) return ack('duplicate', message.id);
      const last = ordered ? await position(message.aggregateId) : 0;
      const early = orderResult(message, last);
      if (early) return early;
      let effect: readonly D1Statement[] | void;
      try {
        effect = await handler(message, {
          db,
          idempotencyKey: message.id,
          attempt,
          traceparent: message.headers.traceparent,
        });
      } catch (error) {
        throw new HandlerFailure(error);
      }
      const at = now();
      const statements = [db.prepare(recordDoneSql).bind(name, message.id, at)];
      if (ordered)
        statements.push(
          db
            .prepare(advancePositionSql)
            .bind(name, message.aggregateId, message.sequence, last, at),
        );
      statements.push(...(effect ?? []));
      try {
        await db.batch(statements);
      } catch (error) {
        // Rolled back. A concurrent delivery may have won (ledger or position fence): re-read
        // and decide as if this delivery had arrived after it.
        if (await isDone(message.id)) return ack('duplicate', message.id);
        if (ordered) {
          const moved = orderResult(message, await position(message.aggregateId));
          if (moved) return moved;
        }
        throw error;
      }
      return ack('processed', message.id);
    } catch (error) {
      return failed(error, message, attempt);
    }
  };

  /** Records a delivery in `consumer_dead_letters`; false when that write failed. */
  const recordDead = async (
    delivery: QueueDelivery,
    result: DeliveryResult,
    body: string,
  ): Promise<boolean> => {
    try {
      await db
        .prepare(insertDeadLetterSql)
        .bind(
          name,
          delivery.id,
          result.messageId ?? null,
          result.reason,
          result.detail ?? null,
          redactSecrets(body, 64_000),
          now(),
        )
        .run();
      return true;
    } catch {
      return false;
    }
  };

  const settle = async (
    delivery: QueueDelivery,
    result: DeliveryResult,
  ): Promise<DeliveryResult> => {
    let final = result;
    // Out of attempts: record in D1 rather than let the queue drop it or retry forever.
    if (final.action === 'retry' && delivery.attempts >= maxAttempts)
      final = dead(
        final.reason === 'early' ? 'early' : 'max-attempts',
        final.messageId,
        `attempt ${delivery.attempts} of ${maxAttempts}: ${final.detail ?? final.reason}`,
      );
    if (final.action === 'dead' && !(await recordDead(delivery, final, bodyText(delivery.body))))
      final = retry('ledger-failed', backoffDelayMs(delivery.attempts, backoff), final.messageId);
    if (final.action === 'retry') {
      const delaySeconds = Math.min(MAX_DELAY_SECONDS, Math.ceil((final.delayMs ?? 0) / 1000));
      delivery.retry({ delaySeconds });
    } else {
      delivery.ack();
    }
    return final;
  };

  const handle = async (delivery: QueueDelivery): Promise<DeliveryResult> => {
    let message: Envelope | undefined;
    let result: DeliveryResult;
    try {
      message = parseEnvelope(bodyText(delivery.body));
      result = await process(message, delivery.attempts);
    } catch (error) {
      const detail = error instanceof EnvelopeError ? error.message : safeErrorText(error);
      result = dead('poison', undefined, detail);
    }
    const final = await settle(delivery, result);
    try {
      options.onResult?.(final, message);
    } catch {
      // An observer must not turn a recorded effect into a redelivery.
    }
    return final;
  };

  return {
    name,
    handle,
    async handleBatch(batch) {
      // One after another: deliveries of the same aggregate in one batch must see each other's
      // positions, and D1 serialises writes anyway.
      const results: DeliveryResult[] = [];
      for (const delivery of batch.messages) results.push(await handle(delivery));
      return results;
    },
  };
}
