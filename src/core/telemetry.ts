import {
  ProxyTracerProvider,
  SpanStatusCode,
  trace,
  type Span,
  type Tracer,
} from '@opentelemetry/api';

/**
 * Tracing through `@opentelemetry/api` only: with no SDK registered every span below is the
 * API's no-op, so the library records nothing and costs next to nothing (measured in bench/,
 * `tracing_overhead`). The application (or `outbox dispatch` with the `OTEL_*` variables)
 * brings the SDK.
 *
 * Span and attribute names follow the OpenTelemetry messaging semantic conventions
 * (`@opentelemetry/semantic-conventions` 1.45: `messaging.*`, `error.type`) and the GenAI ones
 * for the tool call (`gen_ai.*`); what those do not cover is under `outbox.*`. A unit test checks
 * the standard names against the package, which is a dev dependency only.
 */

/** Instrumentation scope of every span agent-outbox records. */
export const TRACER_NAME = 'agent-outbox';

/**
 * The tracer, looked up per use rather than once: `trace.getTracer` returns a proxy that caches
 * the first real tracer it finds, so a module-level one would keep exporting to a provider the
 * application had since replaced (tests, benchmarks, `trace.disable()`).
 */
export function outboxTracer(): Tracer {
  return trace.getTracer(TRACER_NAME);
}

/**
 * False when no OpenTelemetry SDK is registered: every span would be the API's no-op, so a hot
 * path may skip making one (the writer's `create` span: about 13 µs of CPU a business
 * transaction between round trips, measured). Checked per call, as {@link outboxTracer}: an SDK
 * may be registered later. A provider this copy of the API does not know counts as registered.
 */
export function tracerRegistered(): boolean {
  const provider = trace.getTracerProvider();
  return (
    !(provider instanceof ProxyTracerProvider) ||
    provider.getDelegateTracer(TRACER_NAME) !== undefined
  );
}

/** `messaging.system` of the outbox itself: the `create` span, and deliveries of unknown origin. */
export const OUTBOX_MESSAGING_SYSTEM = 'agent_outbox';

/** Attribute names, standard ones first. */
export const ATTR = {
  messagingSystem: 'messaging.system',
  messagingOperationName: 'messaging.operation.name',
  messagingOperationType: 'messaging.operation.type',
  messagingDestinationName: 'messaging.destination.name',
  messagingMessageId: 'messaging.message.id',
  messagingBatchMessageCount: 'messaging.batch.message_count',
  messagingConsumerGroupName: 'messaging.consumer.group.name',
  errorType: 'error.type',
  genAiOperationName: 'gen_ai.operation.name',
  genAiToolName: 'gen_ai.tool.name',
  /** Publish attempt of the message (1 = first), from the outbox row. */
  attempt: 'outbox.attempt',
  aggregateId: 'outbox.aggregate.id',
  sequence: 'outbox.sequence',
  /** `ack`, `retry` or `dead`: what the consumer runtime told the binding. */
  deliveryAction: 'outbox.delivery.action',
  /** Why (`processed`, `duplicate`, `handler-failed`, ...; see `DeliveryReason`). */
  deliveryReason: 'outbox.delivery.reason',
  /** Delivery attempt reported by the broker binding, when it knows it. */
  deliveryAttempt: 'outbox.delivery.attempt',
  /** `transactional` or `claim-first`. */
  ledgerMode: 'outbox.ledger.mode',
  dispatcherId: 'outbox.dispatcher.id',
  /** Lease owner of a claim (`<dispatcher id>#<claim number>`). */
  claimOwner: 'outbox.claim.owner',
  /** Per batch: how the claimed messages were settled. */
  published: 'outbox.batch.published',
  retried: 'outbox.batch.retried',
  deadLettered: 'outbox.batch.dead_lettered',
  released: 'outbox.batch.released',
  toolIdempotencyKey: 'outbox.tool.idempotency_key',
  toolDeduped: 'outbox.tool.deduped',
} as const;

/**
 * Marks `span` as failed: status ERROR with the message, `error.type`, and an `exception`
 * event. `type` is low-cardinality (an error class name or an outcome), never the message.
 */
export function recordFailure(span: Span, type: string, error: unknown): void {
  const message = error instanceof Error ? error.message : String(error);
  span.setAttribute(ATTR.errorType, type);
  span.recordException(error instanceof Error ? error : { name: type, message });
  span.setStatus({ code: SpanStatusCode.ERROR, message });
}
