import { tool, type SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { readEffectStatus, type EffectStatus } from '../admin/effect-status.js';
import { redactSecrets } from '../core/redact.js';
import { errorText } from '../publishers/publisher.js';
import type { TransactionRunner } from './transaction-runner.js';

/** What the model may ask the effect status tool. */
export const EFFECT_STATUS_INPUT = {
  message_ids: z
    .array(z.string().regex(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i))
    .max(50)
    .optional()
    .describe('messageId values from an earlier tool answer ("queued"), at most 50'),
  idempotency_key: z
    .string()
    .min(1)
    .max(255)
    .optional()
    .describe('the idempotency_key of an earlier tool call: reports the effects it queued'),
  tool: z.string().min(1).max(255).optional().describe('with idempotency_key: that tool only'),
};

/** Where a call's tenant comes from: fixed for the tool (one per session), or from the request. */
export type TenantOf =
  string | ((call: { meta: Record<string, unknown> | undefined }) => string | undefined);

/** Options of {@link effectStatusTool}. */
export interface EffectStatusToolOptions<Trx> {
  /** Opens the (read-only) transaction the lookups run in: the runner your outbox tools use. */
  transactions: TransactionRunner<Trx>;
  /** Tool name. Default `effect_status`. */
  name?: string;
  /** Description for the model; the default explains the states. */
  description?: string;
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  /**
   * Consumer names (`createConsumer({ name })`) whose ledger in this database says an effect was
   * performed. Without them, an effect reads `published` at best.
   */
  consumers?: readonly string[];
  /**
   * The tenant whose messages this tool may report: messages whose `tenant_id` header differs (or
   * is missing) read as `not found`. A string for a tool built per session, or a function of the
   * MCP request's `_meta`; a function that returns undefined refuses the call. Without it, every
   * message is visible: set it in any multi-tenant application.
   */
  tenantId?: TenantOf;
}

const DEFAULT_DESCRIPTION =
  'Tells whether side effects queued by earlier tool calls happened: give the messageId values ' +
  'from a tool answer, or the idempotency_key of the call. Each effect is one of: awaiting ' +
  'approval (a person must approve it first), pending (attempts, next try), failed (retrying; ' +
  'last error), published, performed (by which consumer, when), dead (stopped retrying), ' +
  'rejected (by a person; reason), expired (no decision in time), not found. Read-only.';

function sentence(effect: EffectStatus): string {
  const what = effect.topic ? `${effect.topic} for ${effect.aggregateId}` : 'the message';
  const id = `(message ${effect.messageId})`;
  switch (effect.state) {
    case 'awaiting approval':
      return `${what} ${id} is awaiting approval by a person: it has not happened and will not unless approved (expires ${effect.expiresAt}).`;
    case 'pending':
      return `${what} ${id} is pending: approved or needing none, it will be sent${effect.nextTryAt ? ` (next try ${effect.nextTryAt})` : ''}.`;
    case 'failed':
      return `${what} ${id} failed ${effect.attempts} time(s) and is being retried${effect.nextTryAt ? ` at ${effect.nextTryAt}` : ''}: ${effect.lastError}.`;
    case 'published':
      return `${what} ${id} was published at ${effect.publishedAt}; no consumer has reported it performed yet.`;
    case 'performed':
      return `${what} ${id} was performed by ${effect.performedBy!.map((p) => `${p.consumer} at ${p.at}`).join(', ')}.`;
    case 'dead':
      return `${what} ${id} stopped retrying after ${effect.attempts} attempt(s) (${effect.lastError ?? 'no error recorded'}); an operator must look at it.`;
    case 'rejected':
      return `${what} ${id} was rejected by ${effect.decidedBy} at ${effect.decidedAt}: ${effect.reason}. It will never happen.`;
    case 'expired':
      return `${what} ${id} expired without a decision; it will never happen.`;
    default:
      return `No effect with message id ${effect.messageId} is known here.`;
  }
}

function answer(json: Record<string, unknown>, words: string, isError = false): CallToolResult {
  return {
    content: [
      { type: 'text', text: JSON.stringify(json) },
      { type: 'text', text: words },
    ],
    ...(isError ? { isError: true } : {}),
  };
}

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
  const name = options.name ?? 'effect_status';

  async function call(
    args: { message_ids?: string[]; idempotency_key?: string; tool?: string },
    extra: unknown,
  ): Promise<CallToolResult> {
    try {
      let tenantId: string | undefined;
      if (typeof options.tenantId === 'function') {
        const meta = (extra as { _meta?: Record<string, unknown> } | undefined)?._meta;
        tenantId = options.tenantId({ meta });
        if (tenantId === undefined || tenantId === '')
          return answer(
            { ok: false, error: 'no tenant for this call' },
            'This call carries no tenant, so no effect can be reported.',
            true,
          );
      } else tenantId = options.tenantId;
      if (!args.message_ids?.length && args.idempotency_key === undefined)
        return answer(
          { ok: false, error: 'give message_ids or idempotency_key' },
          'Give the messageId values from an earlier tool answer, or that call’s idempotency_key.',
          true,
        );
      const { effects, truncated } = await options.transactions.run(async (tx) => {
        await tx.query('SET TRANSACTION READ ONLY');
        return readEffectStatus(tx, {
          messageIds: args.message_ids,
          idempotencyKey: args.idempotency_key,
          tool: args.tool,
          tenantId,
          consumers: options.consumers,
          schema: options.schema,
        });
      });
      const words =
        effects.length === 0
          ? 'No effects were found for that call.'
          : effects.map(sentence).join(' ');
      return answer(
        { ok: true, effects, ...(truncated > 0 && { truncated }) },
        truncated > 0 ? `${words} (${truncated} more not shown.)` : words,
      );
    } catch (error) {
      const message = redactSecrets(errorText(error));
      return answer({ ok: false, error: message }, `Could not read the status: ${message}.`, true);
    }
  }

  return tool(
    name,
    options.description ?? DEFAULT_DESCRIPTION,
    EFFECT_STATUS_INPUT,
    (args, extra) => call(args, extra),
    { annotations: { readOnlyHint: true, openWorldHint: false } },
  );
}
