import { tool, type SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import {
  createToolCall,
  type AdapterOptions,
  type OutboxToolCall,
  type OutboxToolDefinition,
  type WithIdempotencyKey,
} from './tool-call.js';
import { toCallToolResult } from './tool-result.js';

export {
  IDEMPOTENCY_KEY_FIELD,
  type OutboxToolDefinition,
  type ToolCallContext,
  type ToolInput,
  type ToolScope,
  type WithIdempotencyKey,
} from './tool-call.js';

/**
 * The model's `tool_use` id, which Claude Code puts in the MCP request's `_meta` as
 * `claudecode/toolUseId` (seen with the SDK 0.3.332; test/integration/agent/call-id-claude.test.ts
 * checks it still does).
 */
export const CLAUDE_TOOL_USE_ID_META = 'claudecode/toolUseId';

function claudeToolUseId(meta: Record<string, unknown> | undefined): string | undefined {
  const id = meta?.[CLAUDE_TOOL_USE_ID_META];
  return typeof id === 'string' ? id : undefined;
}

/**
 * The framework-neutral call behind each tool `outboxTool` built: `outboxCanUseTool` and
 * `outboxApprovalHook` ask it whether a call must wait for a person.
 */
const CALLS = new WeakMap<object, OutboxToolCall>();

/** The call behind a tool from {@link outboxTool}, or undefined for any other tool. */
export function outboxCallOf(tool: object): OutboxToolCall | undefined {
  return CALLS.get(tool);
}

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
 * The idempotency key: the `idempotency_key` input when the application's PreToolUse hook
 * (`idempotencyKeyHook`) fills it, else the call's `tool_use` id — so the same call run
 * again (a resumed session, a replayed turn) is answered from the first and writes nothing. The
 * hook still helps when the model RE-PLANS a call (a new id for the same work); so does
 * `dedupeKey`.
 *
 * With `outboxTool(def, { approval: 'call' })` a call whose effect the approval policy would hold
 * waits for a person BEFORE it runs: answer Claude's permission check with `outboxCanUseTool`
 * (waits for the decision in the outbox) or `outboxApprovalHook` (a `PreToolUse` hook that defers
 * the call for long waits). The approved call writes unheld, once; without a recorded approval it
 * writes held.
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
  adapter: AdapterOptions = {},
): SdkMcpToolDefinition<WithIdempotencyKey<Shape>> {
  const call = createToolCall(options, adapter);
  const built = tool(
    call.name,
    call.description,
    call.shape as WithIdempotencyKey<Shape>,
    async (args, extra) => {
      const meta = (extra as { _meta?: Record<string, unknown> } | undefined)?._meta;
      return toCallToolResult(
        await call.call(args as Record<string, unknown>, meta, claudeToolUseId(meta)),
      );
    },
    options.annotations ? { annotations: options.annotations } : undefined,
  );
  CALLS.set(built, call);
  return built;
}
