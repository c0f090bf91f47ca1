import { describe, expect, it } from 'vitest';
import { newTraceContext, parseTraceparent } from '../../../src/agent/index.js';
import { resolveTraceContext } from '../../../src/agent/trace-context.js';

const valid = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('trace context of a tool call', () => {
  it('parses a valid traceparent', () => {
    expect(parseTraceparent(valid)).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      traceparent: valid,
    });
  });

  it.each([
    ['not a string', 42],
    ['garbage', 'abc'],
    ['all-zero trace id', '00-00000000000000000000000000000000-00f067aa0ba902b7-01'],
    ['all-zero parent id', '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'],
    ['version ff', 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
  ])('rejects %s', (_label, value) => {
    expect(parseTraceparent(value)).toBeUndefined();
  });

  it('prefers the caller _meta traceparent and keeps its tracestate', () => {
    expect(resolveTraceContext({ traceparent: valid, tracestate: 'vendor=1' })).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      traceparent: valid,
      tracestate: 'vendor=1',
    });
  });

  it('starts a new sampled trace without (valid) caller context, different each call', () => {
    const a = resolveTraceContext(undefined);
    const b = resolveTraceContext({ traceparent: 'nope' });
    expect(parseTraceparent(a.traceparent)?.traceId).toBe(a.traceId);
    expect(a.traceparent.endsWith('-01')).toBe(true);
    expect(b.traceId).not.toBe(a.traceId);
    expect(newTraceContext().traceId).toMatch(/^[0-9a-f]{32}$/);
  });
});
