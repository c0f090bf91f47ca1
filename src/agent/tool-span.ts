import { context, SpanKind, trace, type Context, type Span } from '@opentelemetry/api';
import { ATTR, outboxTracer, recordFailure } from '../core/telemetry.js';
import { spanContextFromHeaders, traceHeadersOf } from '../core/trace.js';
import { resolveTraceContext, type TraceContext } from './trace-context.js';

/** The span of one tool call and what the call's code runs under. */
export interface ToolSpan {
  /** The span's context: the handler and its `enqueue()` calls run in it. */
  readonly context: Context;
  /** The call's W3C trace context (the span's, or a fresh one when nothing records spans). */
  readonly trace: TraceContext;
  /** Ends the span: a committed call, or a duplicate answered from `outbox_tool_calls`. */
  end(deduped: boolean): void;
  /** Ends the span as failed (the call rolled back). */
  fail(error: unknown): void;
}

/**
 * Starts the `execute_tool <name>` span (kind INTERNAL, OpenTelemetry GenAI conventions) of one
 * tool call, parented on the MCP request's `_meta.traceparent` (how MCP clients propagate W3C
 * context) or else the active span. The messages the call enqueues are `create` spans under it,
 * so their dispatch and consumption join the caller's trace.
 *
 * With no SDK installed the span is the API's no-op carrying its parent's context, so messages
 * carry the caller's `traceparent` as before; with no caller context either, a fresh trace
 * context (as {@link resolveTraceContext} makes) stands in, so every call still has a trace id.
 */
export function startToolSpan(tool: string, idempotencyKey: string, meta: unknown): ToolSpan {
  const given =
    typeof meta === 'object' && meta !== null
      ? (meta as { traceparent?: unknown; tracestate?: unknown })
      : {};
  const caller =
    typeof given.traceparent === 'string'
      ? spanContextFromHeaders({
          traceparent: given.traceparent,
          ...(typeof given.tracestate === 'string' && { tracestate: given.tracestate }),
        })
      : undefined;
  const parent = caller ? trace.setSpanContext(context.active(), caller) : context.active();
  let span: Span = outboxTracer().startSpan(
    `execute_tool ${tool}`,
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        [ATTR.genAiOperationName]: 'execute_tool',
        [ATTR.genAiToolName]: tool,
        [ATTR.toolIdempotencyKey]: idempotencyKey,
      },
    },
    parent,
  );
  let traceContext: TraceContext;
  const headers = traceHeadersOf(span.spanContext());
  if (headers.traceparent) {
    traceContext = {
      traceId: span.spanContext().traceId,
      traceparent: headers.traceparent,
      ...(headers.tracestate && { tracestate: headers.tracestate }),
    };
  } else {
    traceContext = resolveTraceContext(undefined);
    span = trace.wrapSpanContext(
      spanContextFromHeaders({ traceparent: traceContext.traceparent })!,
    );
  }
  return {
    context: trace.setSpan(parent, span),
    trace: traceContext,
    end: (deduped) => {
      span.setAttribute(ATTR.toolDeduped, deduped);
      span.end();
    },
    fail: (error) => {
      recordFailure(span, error instanceof Error ? error.name : 'Error', error);
      span.end();
    },
  };
}
