import { activeTraceHeaders } from '../core/trace.js';
import type { OutgoingMessage } from './publisher.js';

/**
 * The W3C trace context a publisher puts into the broker's own headers (NATS headers, AMQP
 * headers, Redis stream fields, HTTP `traceparent`), so a consumer that reads only those — not
 * the envelope — continues the trace too: the message's `traceparent`/`tracestate` (its `create`
 * span's context, or the dispatcher's `send` span's for a message written without one), else
 * the active span's, for code that calls a publisher itself.
 */
export function brokerTraceHeaders(message: OutgoingMessage): Record<string, string> {
  const { traceparent, tracestate } = message.headers;
  if (!traceparent) return activeTraceHeaders();
  return tracestate ? { traceparent, tracestate } : { traceparent };
}
