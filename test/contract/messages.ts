import { randomUUID } from 'node:crypto';
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
