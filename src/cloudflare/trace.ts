/**
 * W3C trace context at the edge, with Web APIs only (no OpenTelemetry SDK in the Worker): the
 * Postgres writer reads the active OTel span; a Worker usually has none, so the trace starts
 * from the incoming request's `traceparent` — or a new one — and travels in the message headers
 * through D1, the Queue envelope, and into the consumer's handler context.
 */

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** True when `value` is a valid version-00 W3C `traceparent` (not all-zero ids). */
export function isValidTraceparent(value: string | null | undefined): value is string {
  const match = value ? TRACEPARENT.exec(value.trim()) : null;
  if (!match) return false;
  const [, version, traceId, spanId] = match;
  return version !== 'ff' && !/^0+$/.test(traceId!) && !/^0+$/.test(spanId!);
}

function randomHex(bytes: number): string {
  const data = crypto.getRandomValues(new Uint8Array(bytes));
  return Array.from(data, (b) => b.toString(16).padStart(2, '0')).join('');
}

/** A new sampled `traceparent` with random trace and span ids. */
export function newTraceparent(): string {
  return `00-${randomHex(16)}-${randomHex(8)}-01`;
}

/**
 * Trace headers for messages written while handling `request`: its `traceparent` (and
 * `tracestate`) when valid, else a fresh `traceparent`. Pass the result as `enqueue`'s `headers`
 * option.
 *
 * @example
 * ```ts
 * await env.DB.batch([...business, ...enqueue(env.DB, messages, { headers: traceHeaders(request) })]);
 * ```
 */
export function traceHeaders(request?: {
  headers: { get(name: string): string | null };
}): Record<string, string> {
  const incoming = request?.headers.get('traceparent');
  if (!isValidTraceparent(incoming)) return { traceparent: newTraceparent() };
  const headers: Record<string, string> = { traceparent: incoming.trim() };
  const state = request?.headers.get('tracestate');
  if (state) headers.tracestate = state;
  return headers;
}
