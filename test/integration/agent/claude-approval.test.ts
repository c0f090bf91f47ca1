/**
 * Issue 42, Claude Agent SDK: `outboxTool(def, { approval: 'call' })` with `outboxCanUseTool`
 * (Claude's permission check answered from the outbox) and `outboxApprovalHook` (a `PreToolUse`
 * hook that defers the call), through the real `query()` loop (the bundled Claude Code CLI
 * against the scripted fake Messages API), on Postgres.
 */
import { query, type Options } from '@anthropic-ai/claude-agent-sdk';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startFakeMessagesApi,
  toolResults,
  type FakeMessagesApi,
  type ToolResultSeen,
} from '../../../examples/demo/fake-messages-api.js';
import {
  createToolServer,
  decideCallApproval,
  outboxApprovalHook,
  outboxCanUseTool,
  outboxTool,
  watchCallApprovals,
} from '../../../src/agent/index.js';
import { approvalShop } from './frameworks/call-approval-fixture.js';

const TOOL = 'mcp__shop__charge_order';

describe('Claude Agent SDK: approval through canUseTool and a deferring PreToolUse hook', () => {
  const shop = approvalShop();
  let scratch: string;
  let api: FakeMessagesApi;
  /** What the fake model is to call next, by the first prompt's text. */
  const plans = new Map<string, { id: string; order_id: number; amount: number }>();
  /** The tool results the fake model read back, by tool_use id. */
  const results = new Map<string, ToolResultSeen>();

  beforeAll(async () => {
    scratch = await mkdtemp(join(tmpdir(), 'ao-claude-approval-'));
    api = await startFakeMessagesApi((request) => {
      const first = request.messages[0]?.content;
      const prompt = typeof first === 'string' ? first : (first ?? []).map((b) => b.text).join('');
      const plan = [...plans].find(([key]) => prompt.includes(key))?.[1];
      const seen = toolResults(request);
      if (!plan) return { text: 'OK.' };
      if (seen.length > 0) {
        results.set(plan.id, seen[0]!);
        return { text: 'Done.' };
      }
      return {
        toolUses: [
          { name: TOOL, input: { order_id: plan.order_id, amount: plan.amount }, id: plan.id },
        ],
      };
    });
  });
  afterAll(async () => {
    await api?.close();
    await rm(scratch, { recursive: true, force: true });
  });

  const charge = () => outboxTool(shop.definition, { approval: 'call' });

  async function session(prompt: string, options: Partial<Options>) {
    let result: { deferred?: { id: string }; subtype?: string; sessionId?: string } = {};
    for await (const message of query({
      prompt,
      options: {
        tools: [],
        settingSources: [],
        persistSession: false,
        maxTurns: 4,
        cwd: scratch,
        env: {
          PATH: process.env.PATH,
          HOME: scratch,
          ANTHROPIC_BASE_URL: api.url,
          ANTHROPIC_API_KEY: 'fake-key',
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        },
        ...options,
      },
    }))
      if (message.type === 'result')
        result = {
          subtype: message.subtype,
          sessionId: message.session_id,
          deferred: (message as { deferred_tool_use?: { id: string } }).deferred_tool_use,
        };
    return result;
  }

  /** A session whose permission check waits in the outbox, as canUseTool. */
  function withCanUseTool(prompt: string) {
    const tool = charge();
    return session(prompt, {
      mcpServers: { shop: createToolServer({ name: 'shop', tools: [tool] }) },
      canUseTool: outboxCanUseTool({ server: 'shop', tools: [tool], stateRef: prompt, pollMs: 50 }),
    });
  }

  /** Waits until the call's approval was asked for (the session is then waiting on it). */
  async function asked(callId: string) {
    for (;;) {
      const approval = await shop.approval(callId);
      if (approval) return approval;
      await sleep(50);
    }
  }

  it('canUseTool approve: waits, nothing written; approved in the outbox; runs unheld once, also when the call is replayed', async () => {
    plans.set('order one', { id: 'toolu_approve', order_id: 1, amount: 5000 });
    const running = withCanUseTool('Charge order one.');
    const approval = await asked('toolu_approve');
    expect(await shop.charges(1)).toBe(0);
    expect(approval).toMatchObject({ state: 'awaiting', state_ref: 'Charge order one.' });
    await decideCallApproval(shop.executor, `call-${approval.id}`, {
      approve: true,
      by: 'alice',
      delivered: true,
    });
    await running;
    expect(JSON.parse(results.get('toolu_approve')!.parts[0]!)).toMatchObject({
      ok: true,
      deduped: false,
    });
    expect(await shop.charges(1)).toBe(1);
    expect(await shop.messages(1)).toEqual([{ approval_state: null }]);

    // Crashed after the tool committed; the resumed session replays the same tool_use.
    await withCanUseTool('Charge order one.');
    expect(JSON.parse(results.get('toolu_approve')!.parts[0]!)).toMatchObject({
      ok: true,
      deduped: true,
    });
    expect(await shop.charges(1)).toBe(1);
    expect(await shop.messages(1)).toHaveLength(1);
  });

  it('canUseTool deny: rejected in the outbox; the model reads who and why; nothing written', async () => {
    plans.set('order two', { id: 'toolu_deny', order_id: 2, amount: 5000 });
    const running = withCanUseTool('Charge order two.');
    const approval = await asked('toolu_deny');
    await decideCallApproval(shop.executor, `call-${approval.id}`, {
      approve: false,
      by: 'bob',
      reason: 'customer disputes the amount',
    });
    await running;
    const seen = results.get('toolu_deny')!;
    expect(seen.isError).toBe(true);
    expect(seen.parts.join(' ')).toContain('rejected by bob: customer disputes the amount');
    expect(await shop.charges(2)).toBe(0);
  });

  it('canUseTool expire: the sweep expires it; the model reads that it expired; nothing written', async () => {
    plans.set('order three', { id: 'toolu_expire', order_id: 3, amount: 5000 });
    const running = withCanUseTool('Charge order three.');
    await asked('toolu_expire');
    await shop.backdate('toolu_expire');
    const watcher = watchCallApprovals({
      executor: shop.executor,
      intervalMs: 60_000,
      onDecision: () => undefined,
    });
    await watcher.poll();
    await watcher.stop();
    await running;
    expect(results.get('toolu_expire')!.parts.join(' ')).toContain('expired: no decision');
    expect(await shop.charges(3)).toBe(0);
  });

  it('a tool allowed without the outbox (allowedTools) writes nothing unheld', async () => {
    plans.set('order four', { id: 'toolu_allowed', order_id: 4, amount: 5000 });
    await session('Charge order four.', {
      mcpServers: { shop: createToolServer({ name: 'shop', tools: [charge()] }) },
      allowedTools: [TOOL],
    });
    expect(await shop.charges(4)).toBe(1);
    expect(await shop.messages(4)).toEqual([{ approval_state: 'awaiting' }]);
  });

  it('the PreToolUse hook defers an undecided call (session ends, nothing written); the callback resumes the session and the approved call runs unheld', async () => {
    plans.set('order five', { id: 'toolu_defer', order_id: 5, amount: 5000 });
    const tool = charge();
    const hooked = (prompt: string, resume?: string) =>
      session(prompt, {
        mcpServers: { shop: createToolServer({ name: 'shop', tools: [tool] }) },
        allowedTools: [TOOL],
        persistSession: true,
        ...(resume ? { resume } : {}),
        hooks: {
          PreToolUse: [outboxApprovalHook({ server: 'shop', tools: [tool], stateRef: 'five' })],
        },
      });
    const result = await hooked('Charge order five.');
    expect(result.deferred?.id).toBe('toolu_defer');
    expect(await shop.charges(5)).toBe(0);
    const approval = await shop.approval('toolu_defer');
    expect(approval).toMatchObject({ state: 'awaiting', state_ref: 'five' });

    // Decided later, elsewhere; the callback resumes the session its stateRef names.
    await decideCallApproval(shop.executor, `call-${approval!.id}`, { approve: true, by: 'alice' });
    const sessions = new Map([['five', result.sessionId!]]);
    const watcher = watchCallApprovals({
      executor: shop.executor,
      intervalMs: 60_000,
      onDecision: async (d) => {
        if (d.stateRef === 'five') await hooked('Charge order five.', sessions.get(d.stateRef));
      },
    });
    expect((await watcher.poll()).map((d) => d.callId)).toEqual(['toolu_defer']);
    await watcher.stop();
    expect(JSON.parse(results.get('toolu_defer')!.parts[0]!)).toMatchObject({
      ok: true,
      deduped: false,
    });
    expect(await shop.charges(5)).toBe(1);
    expect(await shop.messages(5)).toEqual([{ approval_state: null }]);
    const keys = await shop.db.pool.query(
      `SELECT 1 FROM outbox_tool_calls WHERE idempotency_key = 'toolu_defer'`,
    );
    expect(keys.rows).toHaveLength(1);
  });
});
