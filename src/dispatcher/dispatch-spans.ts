import {
  context,
  isSpanContextValid,
  SpanKind,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';
import { ATTR, outboxTracer, recordFailure } from '../core/telemetry.js';
import { spanContextFromHeaders, traceHeadersOf } from '../core/trace.js';
import type { OutgoingMessage, PublishOutcome, Publisher } from '../publishers/publisher.js';
import type { Settlement } from './outbox-store.js';

/**
 * The dispatcher's spans (issue 19):
 *
 * - one `dispatch batch` span (INTERNAL) per claim that found messages: claim → publish → settle,
 *   started at the claim, ended when the settle is done, linked to the stored context of each
 *   message (up to {@link MAX_LINKS}); its own trace, since a batch carries messages of many;
 * - one `send <topic>` span (PRODUCER) per message handed to the publisher, around the publish
 *   call that carries it, PARENTED on the message's stored context (its `create` span: the
 *   tool call's trace continues) and linked to the batch span. A message written without a
 *   trace context gets its send span under the batch span, and that span's context as its
 *   `traceparent` on the wire (semantic conventions: with no creation context, the send context
 *   is propagated).
 *
 * Without an SDK, {@link startBatchTrace} notices (the API's no-op tracer hands out an invalid
 * span context for a root span) and returns undefined: no per-message work at all, which is what
 * keeps the no-op path free on the hot path (bench `tracing_overhead`). With an SDK whose sampler
 * drops the batch span, send spans are still made: a ParentBased sampler samples them by their
 * message's trace, not by the batch's.
 */

/** Links a batch span carries at most (the SDK's default span link limit). */
export const MAX_LINKS = 128;

/** The tracing of one batch: see the module comment. */
export interface BatchTrace {
  /**
   * The batch span's context, for what names its trace explicitly (the settle's events, and so
   * `outbox dispatch`'s log lines): the CLI registers no async context manager
   * (src/cli/telemetry.ts), so the active context does not follow an `await`.
   */
  readonly spanContext: SpanContext;
  /** Runs `fn` in the batch span's context: publish calls and the settle run in it. */
  within<T>(fn: () => T): T;
  /** Starts the send spans of one publish call. */
  send(publisher: Publisher, messages: readonly OutgoingMessage[]): SendSpans;
  /** Ends the batch span with what the settle planned for each message. */
  end(settlements: readonly Settlement[]): void;
}

/** The send spans of one publish call. */
export interface SendSpans {
  /**
   * The messages to hand to the publisher: the claimed ones, except that a message without a
   * stored trace context is a copy carrying its send span's.
   */
  readonly messages: readonly OutgoingMessage[];
  /** Ends each message's span with its outcome (same order). */
  end(outcomes: readonly PublishOutcome[]): void;
}

/**
 * Starts the batch span of a claim (at `startTime`, when the claim began), or returns undefined
 * when no OpenTelemetry SDK is registered.
 */
export function startBatchTrace(
  dispatcherId: string,
  owner: string,
  messages: readonly OutgoingMessage[],
  startTime: number,
): BatchTrace | undefined {
  const tracer = outboxTracer();
  const parent = context.active();
  const span = tracer.startSpan(
    'dispatch batch',
    {
      kind: SpanKind.INTERNAL,
      startTime,
      attributes: {
        [ATTR.dispatcherId]: dispatcherId,
        [ATTR.claimOwner]: owner,
        [ATTR.messagingBatchMessageCount]: messages.length,
      },
    },
    parent,
  );
  if (!span.isRecording() && !isSpanContextValid(span.spanContext())) return undefined;
  // Each message's header parsed once per batch: for the links here, the send span's parent later.
  const stored = new Map<OutgoingMessage, SpanContext | undefined>();
  const links: Link[] = [];
  for (const message of messages) {
    const spanContext = spanContextFromHeaders(message.headers);
    stored.set(message, spanContext);
    if (spanContext && links.length < MAX_LINKS) links.push({ context: spanContext });
  }
  if (links.length > 0 && span.isRecording()) span.addLinks(links);
  const batchContext = trace.setSpan(parent, span);
  const spanContext = span.spanContext();
  const batchLink: Link[] = [{ context: spanContext }];
  return {
    spanContext,
    within: (fn) => context.with(batchContext, fn),
    send: (publisher, batch) => startSendSpans(publisher, batch, stored, batchContext, batchLink),
    end: (settlements) => endBatch(span, settlements),
  };
}

/** A claim that failed: a batch span of its own, failed, so the trace shows the outage. */
export function traceClaimFailure(
  dispatcherId: string,
  owner: string,
  startTime: number,
  error: Error,
): void {
  const span = outboxTracer().startSpan('dispatch batch', {
    kind: SpanKind.INTERNAL,
    startTime,
    attributes: { [ATTR.dispatcherId]: dispatcherId, [ATTR.claimOwner]: owner },
  });
  if (!span.isRecording()) return;
  recordFailure(span, error.name, error);
  span.end();
}

function startSendSpans(
  publisher: Publisher,
  messages: readonly OutgoingMessage[],
  storedContexts: ReadonlyMap<OutgoingMessage, SpanContext | undefined>,
  batchContext: Context,
  links: Link[],
): SendSpans {
  const tracer = outboxTracer();
  const spans: Span[] = [];
  let handed: OutgoingMessage[] | undefined;
  messages.forEach((message, index) => {
    const stored = storedContexts.has(message)
      ? storedContexts.get(message)
      : spanContextFromHeaders(message.headers);
    // Few attributes on purpose: each costs its serialisation per message (bench
    // tracing_overhead); the aggregate and sequence are on the consumer's process span.
    const attributes: Attributes = {
      [ATTR.messagingSystem]: publisher.messagingSystem?.(message) ?? 'unknown',
      [ATTR.messagingOperationName]: 'send',
      [ATTR.messagingOperationType]: 'send',
      [ATTR.messagingDestinationName]: message.topic,
      [ATTR.messagingMessageId]: message.id,
      [ATTR.attempt]: message.attempts,
    };
    const span = tracer.startSpan(
      `send ${message.topic}`,
      { kind: SpanKind.PRODUCER, attributes, links },
      stored ? trace.setSpanContext(batchContext, stored) : batchContext,
    );
    spans.push(span);
    if (!stored && isSpanContextValid(span.spanContext())) {
      handed ??= [...messages];
      handed[index] = {
        ...message,
        headers: { ...message.headers, ...traceHeadersOf(span.spanContext()) },
      };
    }
  });
  return {
    messages: handed ?? messages,
    end: (outcomes) =>
      spans.forEach((span, i) => {
        const outcome = outcomes[i];
        // Published: nothing to add. Otherwise error.type says which failure.
        if (outcome && outcome.status !== 'published')
          recordFailure(span, outcome.status, outcome.error);
        span.end();
      }),
  };
}

function endBatch(span: Span, settlements: readonly Settlement[]): void {
  const count = { published: 0, retried: 0, deadLettered: 0, released: 0 };
  for (const s of settlements) {
    if (s.kind === 'published' || s.kind === 'shadow') count.published++;
    else if (s.kind === 'retry') count.retried++;
    else if (s.kind === 'dead') count.deadLettered++;
    else count.released++;
  }
  span.setAttributes({
    [ATTR.published]: count.published,
    [ATTR.retried]: count.retried,
    [ATTR.deadLettered]: count.deadLettered,
    [ATTR.released]: count.released,
  });
  span.end();
}
