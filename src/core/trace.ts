import { context, isSpanContextValid, trace, TraceFlags } from '@opentelemetry/api';

/**
 * W3C trace context of the active OpenTelemetry span, if there is one. Read straight from the
 * span rather than through `propagation.inject`, which does nothing until the application has
 * registered a global propagator — and we want the trace id even then.
 */
export function activeTraceHeaders(): Record<string, string> {
  const span = trace.getSpan(context.active());
  if (!span) return {};
  const spanContext = span.spanContext();
  if (!isSpanContextValid(spanContext)) return {};
  const sampled = (spanContext.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;
  const headers: Record<string, string> = {
    traceparent: `00-${spanContext.traceId}-${spanContext.spanId}-${sampled ? '01' : '00'}`,
  };
  const state = spanContext.traceState?.serialize();
  if (state) headers.tracestate = state;
  return headers;
}
