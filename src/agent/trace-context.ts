import { randomBytes } from 'node:crypto';
import { activeTraceHeaders } from '../core/trace.js';

/** W3C trace context of one tool call. */
export interface TraceContext {
  /** 32 lowercase hex digits. */
  traceId: string;
  /** `00-<trace id>-<parent id>-<flags>`, written as the `traceparent` header of each message. */
  traceparent: string;
  /** Vendor trace state, passed through unchanged when the caller gave one. */
  tracestate?: string;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** Parses a W3C `traceparent`; undefined when it is missing or invalid (all-zero ids, version ff). */
export function parseTraceparent(value: unknown): TraceContext | undefined {
  if (typeof value !== 'string') return undefined;
  const match = TRACEPARENT.exec(value.trim().toLowerCase());
  if (!match) return undefined;
  const [, version, traceId, parentId] = match as unknown as [string, string, string, string];
  if (version === 'ff' || /^0+$/.test(traceId) || /^0+$/.test(parentId)) return undefined;
  return { traceId, traceparent: match[0] };
}

/** A new sampled root trace context, for calls whose caller sent none. */
export function newTraceContext(): TraceContext {
  const traceId = randomBytes(16).toString('hex');
  return { traceId, traceparent: `00-${traceId}-${randomBytes(8).toString('hex')}-01` };
}

/**
 * The trace context of a tool call, in order of preference: the MCP request's
 * `_meta.traceparent` (how MCP clients propagate W3C context), the active OpenTelemetry span, a
 * new one. Never fails: a malformed caller value starts a new trace rather than rejecting the call.
 */
export function resolveTraceContext(meta: unknown): TraceContext {
  const fromMeta =
    typeof meta === 'object' && meta !== null
      ? (meta as { traceparent?: unknown; tracestate?: unknown })
      : {};
  const given = parseTraceparent(fromMeta.traceparent);
  if (given) {
    return typeof fromMeta.tracestate === 'string' && fromMeta.tracestate !== ''
      ? { ...given, tracestate: fromMeta.tracestate }
      : given;
  }
  const active = activeTraceHeaders();
  const fromSpan = parseTraceparent(active.traceparent);
  if (fromSpan)
    return active.tracestate ? { ...fromSpan, tracestate: active.tracestate } : fromSpan;
  return newTraceContext();
}
