import {
  context,
  createTraceState,
  isSpanContextValid,
  trace,
  TraceFlags,
  type Context,
  type SpanContext,
} from '@opentelemetry/api';

/**
 * W3C trace context of the active OpenTelemetry span, if there is one. Read straight from the
 * span rather than through `propagation.inject`, which does nothing until the application has
 * registered a global propagator — and we want the trace id even then.
 */
export function activeTraceHeaders(): Record<string, string> {
  const span = trace.getSpan(context.active());
  return span ? traceHeadersOf(span.spanContext()) : {};
}

/** `traceparent` (and `tracestate`) of a span context; empty for an invalid one. */
export function traceHeadersOf(spanContext: SpanContext): Record<string, string> {
  if (!isSpanContextValid(spanContext)) return {};
  const sampled = (spanContext.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;
  const headers: Record<string, string> = {
    traceparent: `00-${spanContext.traceId}-${spanContext.spanId}-${sampled ? '01' : '00'}`,
  };
  const state = spanContext.traceState?.serialize();
  if (state) headers.tracestate = state;
  return headers;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
/** What we write, and nearly every message carries: checked without captures or copies. */
const CANONICAL = /^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/;

/**
 * The remote span context a message's `traceparent` (and `tracestate`) header describes, or
 * undefined when it has none or an invalid one (all-zero ids, version ff, a version-00 value with
 * extra fields). Written by hand for the same reason as {@link activeTraceHeaders}: the global
 * propagator may not be registered.
 */
export function spanContextFromHeaders(
  headers: Readonly<Record<string, string>> | undefined,
): SpanContext | undefined {
  const value = headers?.traceparent;
  if (typeof value !== 'string') return undefined;
  // The dispatcher parses every claimed message's header: the common shape takes a fast path.
  if (value.length === 55 && CANONICAL.test(value)) {
    return withState(
      {
        traceId: value.slice(3, 35),
        spanId: value.slice(36, 52),
        traceFlags: value.charCodeAt(54) === 49 ? TraceFlags.SAMPLED : TraceFlags.NONE,
        isRemote: true,
      },
      headers?.tracestate,
    );
  }
  const match = TRACEPARENT.exec(value.trim().toLowerCase());
  if (!match) return undefined;
  const [, version, traceId, spanId, flags, rest] = match as unknown as [
    string,
    string,
    string,
    string,
    string,
    string | undefined,
  ];
  if (version === 'ff' || (version === '00' && rest !== undefined)) return undefined;
  const spanContext: SpanContext = {
    traceId,
    spanId,
    traceFlags: parseInt(flags, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  };
  return withState(spanContext, headers?.tracestate);
}

/** `spanContext` with `tracestate`, or undefined when its ids are all zeros. */
function withState(spanContext: SpanContext, state: string | undefined): SpanContext | undefined {
  if (!isSpanContextValid(spanContext)) return undefined;
  if (typeof state === 'string' && state !== '') spanContext.traceState = createTraceState(state);
  return spanContext;
}

/**
 * `base` with the span context of `headers` as its (remote) parent span; `base` itself when the
 * headers carry no valid trace context.
 */
export function contextFromHeaders(
  headers: Readonly<Record<string, string>> | undefined,
  base: Context,
): Context {
  const spanContext = spanContextFromHeaders(headers);
  return spanContext ? trace.setSpanContext(base, spanContext) : base;
}
