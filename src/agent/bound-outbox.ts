import type { EnqueuedMessage, OutboxMessage } from '../core/message.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { OutboxWriter } from '../writer/create-outbox.js';
import type { TraceContext } from './trace-context.js';

/** The outbox writer bound to a tool call's transaction: no executor argument to get wrong. */
export interface BoundOutbox {
  /** Schema of the outbox table written to. */
  readonly schema: string;
  /**
   * Validates and inserts messages in the tool call's transaction, with the call's trace
   * context as `traceparent` (a header the message sets itself wins). Rolled back with the call.
   */
  enqueue(message: OutboxMessage): Promise<EnqueuedMessage>;
  enqueue(messages: readonly OutboxMessage[]): Promise<EnqueuedMessage[]>;
}

/** A {@link BoundOutbox} plus what the tool helper needs to report and to close it. */
export interface TrackedOutbox extends BoundOutbox {
  /** Every message enqueued through it, in order. */
  readonly enqueued: readonly EnqueuedMessage[];
  /** Makes later `enqueue` calls throw: the transaction they would write to is over. */
  close(): void;
}

/** Binds `writer` to `tx` and stamps each message with the call's trace context. */
export function bindOutbox(
  writer: OutboxWriter,
  tx: SqlExecutor,
  trace: TraceContext,
): TrackedOutbox {
  const enqueued: EnqueuedMessage[] = [];
  let closed = false;
  const traceHeaders: Record<string, string> = { traceparent: trace.traceparent };
  if (trace.tracestate) traceHeaders.tracestate = trace.tracestate;

  // Non-objects pass through untouched so the writer's validation reports them as it always does.
  const stamp = (message: OutboxMessage): OutboxMessage =>
    typeof message === 'object' && message !== null && !Array.isArray(message)
      ? { ...message, headers: { ...traceHeaders, ...message.headers } }
      : message;

  async function enqueue(
    input: OutboxMessage | readonly OutboxMessage[],
  ): Promise<EnqueuedMessage | EnqueuedMessage[]> {
    if (closed) {
      throw new Error(
        'agent-outbox: outbox.enqueue() called after the tool call ended; its transaction is already committed or rolled back',
      );
    }
    if (Array.isArray(input)) {
      const written = await writer.enqueue(tx, (input as readonly OutboxMessage[]).map(stamp));
      enqueued.push(...written);
      return written;
    }
    const written = await writer.enqueue(tx, stamp(input as OutboxMessage));
    enqueued.push(written);
    return written;
  }

  return {
    schema: writer.schema,
    enqueue: enqueue as BoundOutbox['enqueue'],
    enqueued,
    close: () => {
      closed = true;
    },
  };
}
