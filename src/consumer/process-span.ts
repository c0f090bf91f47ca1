import {
  context,
  SpanKind,
  trace,
  type Attributes,
  type Context,
  type Span,
} from '@opentelemetry/api';
import { ATTR, OUTBOX_MESSAGING_SYSTEM, outboxTracer, recordFailure } from '../core/telemetry.js';
import { contextFromHeaders } from '../core/trace.js';
import type { Envelope } from '../publishers/envelope.js';
import type { DeliveryReason, DeliveryResult } from './delivery-result.js';

/** Results that mean something went wrong (the others are an answer: done, or not yet). */
const FAILED: ReadonlySet<DeliveryReason> = new Set<DeliveryReason>([
  'handler-failed',
  'ledger-failed',
  'poison',
  'permanent-failure',
  'max-attempts',
]);

/** The `process` span of one delivery and the context the handler runs in. */
export interface ProcessSpan {
  span: Span;
  /** The span's context: the handler runs in it, so the handler's own spans are its children. */
  context: Context;
}

/**
 * Starts the `process <topic>` span (kind CONSUMER, messaging semantic conventions) of one
 * delivery, parented on the message's trace context (its `traceparent` header: the tool call's
 * trace continues) or, without one, on the active context. `message` is undefined for a body
 * that is not an envelope.
 */
export function startProcessSpan(
  consumer: string,
  mode: 'transactional' | 'claim-first',
  message: Envelope | undefined,
  meta: { attempt?: number; messagingSystem?: string },
): ProcessSpan {
  const attributes: Attributes = {
    [ATTR.messagingSystem]: meta.messagingSystem ?? OUTBOX_MESSAGING_SYSTEM,
    [ATTR.messagingOperationName]: 'process',
    [ATTR.messagingOperationType]: 'process',
    [ATTR.messagingConsumerGroupName]: consumer,
    [ATTR.ledgerMode]: mode,
  };
  if (message) {
    attributes[ATTR.messagingDestinationName] = message.topic;
    attributes[ATTR.messagingMessageId] = message.id;
    attributes[ATTR.aggregateId] = message.aggregateId;
    attributes[ATTR.sequence] = message.sequence;
  }
  if (meta.attempt !== undefined) attributes[ATTR.deliveryAttempt] = meta.attempt;
  const parent = contextFromHeaders(message?.headers, context.active());
  const span = outboxTracer().startSpan(
    message ? `process ${message.topic}` : 'process',
    { kind: SpanKind.CONSUMER, attributes },
    parent,
  );
  return { span, context: trace.setSpan(parent, span) };
}

/** Ends the span with the result: action and reason, and the failure when there was one. */
export function endProcessSpan(span: Span, result: DeliveryResult): void {
  span.setAttribute(ATTR.deliveryAction, result.action);
  span.setAttribute(ATTR.deliveryReason, result.reason);
  if (FAILED.has(result.reason)) recordFailure(span, result.reason, result.detail ?? result.reason);
  span.end();
}
