import type { Context } from '@opentelemetry/api';
import type { EnqueuedMessage, OutboxMessage } from '../core/message.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import type { OutboxWriter } from '../writer/create-outbox.js';

/** The outbox writer bound to a tool call's transaction: no executor argument to get wrong. */
export interface BoundOutbox {
  /** Schema of the outbox table written to. */
  readonly schema: string;
  /**
   * Validates and inserts messages in the tool call's transaction. Each call's `create` span is
   * a child of the tool call's span, and its context is the messages' `traceparent` (a header
   * the message sets itself wins). Rolled back with the call.
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

/**
 * Binds `writer` to `tx` and to the tool call's OpenTelemetry context, passed to each `enqueue`
 * explicitly (not through the context manager, which is a no-op when no SDK is installed: the
 * messages must carry the call's trace context even then).
 */
export function bindOutbox(
  writer: OutboxWriter,
  tx: SqlExecutor,
  callContext: Context,
): TrackedOutbox {
  const enqueued: EnqueuedMessage[] = [];
  let closed = false;
  const options = { context: callContext };

  async function enqueue(
    input: OutboxMessage | readonly OutboxMessage[],
  ): Promise<EnqueuedMessage | EnqueuedMessage[]> {
    if (closed) {
      throw new Error(
        'agent-outbox: outbox.enqueue() called after the tool call ended; its transaction is already committed or rolled back',
      );
    }
    if (Array.isArray(input)) {
      const written = await writer.enqueue(tx, input as readonly OutboxMessage[], options);
      enqueued.push(...written);
      return written;
    }
    const written = await writer.enqueue(tx, input as OutboxMessage, options);
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
