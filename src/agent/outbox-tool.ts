import { tool, type SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import { createToolCall, type OutboxToolDefinition, type WithIdempotencyKey } from './tool-call.js';
import { toCallToolResult } from './tool-result.js';

export {
  IDEMPOTENCY_KEY_FIELD,
  type OutboxToolDefinition,
  type ToolCallContext,
  type ToolInput,
  type ToolScope,
  type WithIdempotencyKey,
} from './tool-call.js';

/** Options of {@link outboxTool}: the shared {@link OutboxToolDefinition}, plus MCP annotations. */
export interface OutboxToolOptions<
  Shape extends z.ZodRawShape,
  Trx,
  Result,
> extends OutboxToolDefinition<Shape, Trx, Result> {
  /** MCP tool annotations (readOnlyHint, destructiveHint, ...). */
  annotations?: ToolAnnotations;
}

/**
 * Defines a Claude Agent SDK tool whose handler runs in one database transaction and writes side
 * effects to the outbox instead of performing them.
 *
 * Per call: BEGIN; claim `(name, idempotency_key)` in `outbox_tool_calls` (a committed duplicate
 * answers `{ ok: true, deduped: true }` and writes nothing; a concurrent one waits for the first);
 * run the handler with `{ tx, trx, outbox, ctx }`; store its result; COMMIT. Any throw rolls back
 * — business rows, messages and the key — and answers `isError: true` with the error, secrets
 * redacted. Register the result with {@link createToolServer}. The same definition builds the
 * tool for the AI SDK (`agent-outbox/ai-sdk`), the OpenAI Agents SDK (`agent-outbox/openai-agents`)
 * and LangChain (`agent-outbox/langchain`).
 *
 * The idempotency key is an input field but must come from your application, not the model (e.g.
 * one per user request, or a PreToolUse hook that fills it): a model inventing keys defeats it.
 *
 * @example
 * ```ts
 * const createOrder = outboxTool({
 *   name: 'create_order',
 *   description: 'Creates an order; the card is charged and a receipt mailed afterwards.',
 *   input: { user_id: z.string(), amount: z.number().int().positive() },
 *   transactions: kyselyTransactions(db),
 *   handler: async (input, { trx, outbox }) => {
 *     const order = await trx.insertInto('orders').values(input).returning('id').executeTakeFirstOrThrow();
 *     await outbox.enqueue({ topic: 'payment.charge', aggregateId: `order:${order.id}`, payload: input });
 *     return { orderId: order.id };
 *   },
 * });
 * ```
 */
export function outboxTool<Shape extends z.ZodRawShape, Trx, Result>(
  options: OutboxToolOptions<Shape, Trx, Result>,
): SdkMcpToolDefinition<WithIdempotencyKey<Shape>> {
  const call = createToolCall(options);
  return tool(
    call.name,
    call.description,
    call.shape as WithIdempotencyKey<Shape>,
    async (args, extra) =>
      toCallToolResult(
        await call.call(
          args as Record<string, unknown>,
          (extra as { _meta?: unknown } | undefined)?._meta,
        ),
      ),
    options.annotations ? { annotations: options.annotations } : undefined,
  );
}
