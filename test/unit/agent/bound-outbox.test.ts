import { ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { describe, expect, it } from 'vitest';
import { bindOutbox } from '../../../src/agent/bound-outbox.js';
import { spanContextFromHeaders } from '../../../src/core/trace.js';
import { createOutbox, type OutboxMessage, type SqlExecutor } from '../../../src/index.js';

/** Records the batch the writer sends and answers like the insert statement. */
function recordingExecutor() {
  const batches: { h: Record<string, string>; a: string; t: string }[][] = [];
  const executor: SqlExecutor = {
    async query<Row>(_text: string, values?: readonly unknown[]) {
      const batch = JSON.parse(String(values?.[0])) as {
        h: Record<string, string>;
        a: string;
        t: string;
      }[];
      batches.push(batch);
      const rows = batch.map((row, index) => ({
        id: String(index + 1),
        messageId: `m-${index}`,
        sequence: String(index + 1),
        topic: row.t,
        aggregateId: row.a,
      }));
      return { rows: rows as Row[] };
    },
  };
  return { executor, batches };
}

const traceparent = `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01`;
/** A tool call's context as it is with no OpenTelemetry SDK: the caller's span context only. */
const callContext = (tracestate?: string) =>
  trace.setSpanContext(
    ROOT_CONTEXT,
    spanContextFromHeaders({ traceparent, ...(tracestate && { tracestate }) })!,
  );
const message: OutboxMessage = { topic: 'mail.send', aggregateId: 'order:1', payload: {} };

describe('bindOutbox', () => {
  it('writes the call trace context without an SDK or context manager, but a header the message sets wins', async () => {
    const { executor, batches } = recordingExecutor();
    const outbox = bindOutbox(createOutbox({ engine: 'claims' }), executor, callContext('v=1'));
    await outbox.enqueue([message, { ...message, headers: { traceparent: 'mine' } }]);
    expect(batches[0]![0]!.h).toMatchObject({ traceparent, tracestate: 'v=1' });
    expect(batches[0]![1]!.h.traceparent).toBe('mine');
    expect(outbox.enqueued).toHaveLength(2);
  });

  it('refuses to write after the call ended', async () => {
    const { executor, batches } = recordingExecutor();
    const outbox = bindOutbox(createOutbox({ engine: 'claims' }), executor, callContext());
    await outbox.enqueue(message);
    outbox.close();
    await expect(outbox.enqueue(message)).rejects.toThrow(/after the tool call ended/);
    expect(batches).toHaveLength(1);
  });

  it('leaves invalid messages to the writer validation', async () => {
    const { executor } = recordingExecutor();
    const outbox = bindOutbox(createOutbox({ engine: 'claims' }), executor, callContext());
    await expect(outbox.enqueue('nope' as unknown as OutboxMessage)).rejects.toThrow();
  });
});
