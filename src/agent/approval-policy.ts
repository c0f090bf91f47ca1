import type { OutboxMessage } from '../core/message.js';
import type { OutboxWriter } from '../writer/create-outbox.js';

/**
 * Decides, for each message a tool enqueues, whether it waits for a person's approval: `true`
 * writes it held (`requiresApproval`), whatever the handler set. Gets the message and the tool's
 * parsed input, e.g.
 * `(message, input) => message.topic === 'payment.refund' && input.amount > 10_000`.
 * A policy that throws fails the tool call (rolled back): better than sending what it could not
 * judge.
 */
export type ApprovalPolicy<Input> = (message: OutboxMessage, input: Input) => boolean;

/** Longest `approvalRequestedBy` (validate.ts checks names to this length). */
const MAX_REQUESTED_BY = 255;

/**
 * `writer`, with every message the policy holds (or the handler wrote held) marked
 * `requiresApproval` and, unless it says otherwise, requested by the tool call: `requestedBy`.
 * Non-objects pass through untouched, so the writer's validation reports them as usual.
 */
export function withApprovalPolicy<Input>(
  writer: OutboxWriter,
  policy: ApprovalPolicy<Input> | undefined,
  input: Input,
  requestedBy: string,
): OutboxWriter {
  const by = requestedBy.slice(0, MAX_REQUESTED_BY);
  const mark = (message: OutboxMessage): OutboxMessage => {
    if (typeof message !== 'object' || message === null || Array.isArray(message)) return message;
    const held = message.requiresApproval === true || policy?.(message, input) === true;
    if (!held) return message;
    return {
      ...message,
      requiresApproval: true,
      approvalRequestedBy: message.approvalRequestedBy ?? by,
    };
  };
  // Further arguments (per-call options) go to the writer unchanged.
  const enqueue = (executor: unknown, messages: unknown, ...rest: unknown[]) =>
    (writer.enqueue as (...args: unknown[]) => Promise<unknown>)(
      executor,
      Array.isArray(messages)
        ? (messages as OutboxMessage[]).map(mark)
        : mark(messages as OutboxMessage),
      ...rest,
    );
  return { schema: writer.schema, enqueue: enqueue as OutboxWriter['enqueue'] };
}
