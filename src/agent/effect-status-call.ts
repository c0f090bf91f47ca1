import { z } from 'zod';
import { readEffectStatus, type EffectStatus } from '../admin/effect-status.js';
import { redactSecrets } from '../core/redact.js';
import { errorText } from '../publishers/publisher.js';
import type { ToolAnswer } from './tool-result.js';
import type { TransactionRunner } from './transaction-runner.js';

/**
 * The effect status tool, whatever the framework: `effectStatusTool` (Claude Agent SDK) and the
 * `…EffectStatusTool` of each adapter wrap {@link createEffectStatusCall}. Imports no framework.
 */

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

/** Options of the effect status tool (`effectStatusTool` and each adapter's). */
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
   * request's `_meta` (MCP; the other adapters pass their own call context as `meta`); a function that returns undefined refuses the call. Without it, every
   * message is visible: set it in any multi-tenant application.
   */
  tenantId?: TenantOf;
  /**
   * Which engine's messages (default: the one the schema records, `readDatabaseEngine`, read at
   * each call): `'lanes'` for `createOutbox({ engine: 'lanes' })` (see `readEffectStatus`).
   */
  engine?: 'claims' | 'lanes';
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
      return `${what} ${id} was published${effect.publishedAt ? ` at ${effect.publishedAt}` : ''}; no consumer has reported it performed yet.`;
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

function answer(json: Record<string, unknown>, words: string, isError = false): ToolAnswer {
  return { json, words, isError };
}

/** The effect status tool as a framework-neutral call (see {@link OutboxToolCall}). */
export interface EffectStatusCall {
  name: string;
  description: string;
  shape: typeof EFFECT_STATUS_INPUT;
  schema: z.ZodObject<typeof EFFECT_STATUS_INPUT>;
  /** `meta`: what a function `tenantId` is given (MCP `_meta`, or the adapter's call context). */
  call(
    args: { message_ids?: string[]; idempotency_key?: string; tool?: string },
    meta?: unknown,
  ): Promise<ToolAnswer>;
}

/**
 * Reads what became of the side effects earlier tool calls queued (issue 20): by message ids
 * (from an outbox tool's answer) or by a call's idempotency key. Read-only (its transaction is
 * `READ ONLY`), bounded (at most 50 messages, each an index probe), and tenant-scoped when
 * `tenantId` is set.
 */
export function createEffectStatusCall<Trx>(
  options: EffectStatusToolOptions<Trx>,
): EffectStatusCall {
  const name = options.name ?? 'effect_status';

  async function call(
    args: { message_ids?: string[]; idempotency_key?: string; tool?: string },
    meta: unknown,
  ): Promise<ToolAnswer> {
    try {
      let tenantId: string | undefined;
      if (typeof options.tenantId === 'function') {
        tenantId = options.tenantId({ meta: meta as Record<string, unknown> | undefined });
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
          engine: options.engine,
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

  return {
    name,
    description: options.description ?? DEFAULT_DESCRIPTION,
    shape: EFFECT_STATUS_INPUT,
    schema: z.object(EFFECT_STATUS_INPUT),
    call,
  };
}
