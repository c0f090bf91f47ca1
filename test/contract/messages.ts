import { randomUUID } from 'node:crypto';
import { toEnvelope } from '../../src/publishers/envelope.js';
import type { OutgoingMessage } from '../../src/publishers/publisher.js';

let rowId = 0;

/** A fresh outgoing message; every field can be overridden. */
export function makeMessage(overrides: Partial<OutgoingMessage> = {}): OutgoingMessage {
  rowId++;
  return {
    id: randomUUID(),
    rowId: String(rowId),
    topic: 'test.topic',
    aggregateId: `agg-${rowId}`,
    sequence: 1,
    payload: { n: rowId, text: 'grüße ✓', nested: { list: [1, 2, 3], flag: true, none: null } },
    headers: {
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tenant_id: 'tenant-a',
      schema_version: '1',
    },
    createdAt: new Date('2026-01-02T03:04:05.678Z'),
    attempts: 1,
    ...overrides,
  };
}

/** A short random name for topics, queues and streams, so runs and tests never share one. */
export function uniqueName(prefix = 't'): string {
  return `${prefix}${randomUUID().replace(/-/g, '').slice(0, 10)}`;
}

/** Bytes of the message's envelope JSON: the body every publisher sends. */
export function envelopeBytes(message: OutgoingMessage): number {
  return Buffer.byteLength(JSON.stringify(toEnvelope(message)));
}

/** A fresh message whose envelope JSON is exactly `bytes` long (an ASCII string payload). */
export function makeMessageOfEnvelopeBytes(
  bytes: number,
  overrides: Partial<OutgoingMessage> = {},
): OutgoingMessage {
  const message = makeMessage({ ...overrides, payload: '' });
  const padding = bytes - envelopeBytes(message);
  if (padding < 0) throw new RangeError(`an envelope cannot be as small as ${bytes} bytes`);
  return { ...message, payload: 'x'.repeat(padding) };
}
