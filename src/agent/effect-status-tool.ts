import { tool, type SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import {
  createEffectStatusCall,
  EFFECT_STATUS_INPUT,
  type EffectStatusToolOptions,
} from './effect-status-call.js';
import { toCallToolResult } from './tool-result.js';

export {
  EFFECT_STATUS_INPUT,
  type EffectStatusToolOptions,
  type TenantOf,
} from './effect-status-call.js';

/**
 * An MCP tool the model calls to learn what became of the side effects its earlier tool calls
 * queued (issue 20): by message ids (from an outbox tool's answer) or by a call's idempotency key.
 * Read-only (its transaction is `READ ONLY`), bounded (at most 50 messages, each an index probe),
 * and tenant-scoped when `tenantId` is set. Register it next to your outbox tools.
 *
 * @example
 * ```ts
 * const status = effectStatusTool({
 *   transactions: kyselyTransactions(db),
 *   consumers: ['payments', 'mailer'],
 *   tenantId: session.tenantId,
 * });
 * createToolServer({ name: 'shop', tools: [refundOrder, status] }); // mcp__shop__effect_status
 * ```
 */
export function effectStatusTool<Trx>(
  options: EffectStatusToolOptions<Trx>,
): SdkMcpToolDefinition<typeof EFFECT_STATUS_INPUT> {
  const status = createEffectStatusCall(options);
  return tool(
    status.name,
    status.description,
    EFFECT_STATUS_INPUT,
    async (args, extra) =>
      toCallToolResult(await status.call(args, (extra as { _meta?: unknown } | undefined)?._meta)),
    { annotations: { readOnlyHint: true, openWorldHint: false } },
  );
}
