/**
 * Issue 42, LangChain / LangGraph: `langChainTool(def, { approval: 'call', interrupt })` pauses
 * the graph through LangGraph's own human-in-the-loop `interrupt`, the person's decision is
 * recorded in the outbox, and the thread is resumed with `Command({ resume })`. LangGraph runs
 * the tool again from its first line on resume; the outbox (not the resume value) decides. Through
 * `createReactAgent` with a fake chat model and a checkpointer, on Postgres.
 */
import { AIMessage, type BaseMessage } from '@langchain/core/messages';
import type { ChatResult } from '@langchain/core/outputs';
import { FakeStreamingChatModel } from '@langchain/core/utils/testing';
import { Command, interrupt, MemorySaver } from '@langchain/langgraph';
import { createReactAgent } from '@langchain/langgraph/prebuilt';
import { describe, expect, it } from 'vitest';
import {
  decideCallApproval,
  langChainTool,
  watchCallApprovals,
  type CallDecision,
} from '../../../../src/langchain/index.js';
import { runCli } from '../../../helpers/run-cli.js';
import { approvalShop } from './call-approval-fixture.js';

/** Calls `charge_order` once with `callId`; once a tool message is in the history, answers text. */
class ChargingChatModel extends FakeStreamingChatModel {
  readonly seen: string[] = [];
  constructor(
    readonly callId: string,
    readonly args: { order_id: number; amount: number },
  ) {
    super({});
  }

  override bindTools(): ReturnType<FakeStreamingChatModel['bindTools']> {
    return this as unknown as ReturnType<FakeStreamingChatModel['bindTools']>;
  }

  override async _generate(messages: BaseMessage[]): Promise<ChatResult> {
    const tool = messages.find((m) => m.getType() === 'tool');
    if (tool) this.seen.push(String(tool.content));
    const message = tool
      ? new AIMessage({ content: 'Done.' })
      : new AIMessage({
          content: '',
          tool_calls: [
            { id: this.callId, name: 'charge_order', args: this.args, type: 'tool_call' as const },
          ],
        });
    return { generations: [{ text: '', message }] };
  }
}

/**
 * A checkpointer that can "crash": while `crashed`, saving fails — as if the process died after
 * the tool committed and before LangGraph stored the tool node's writes and checkpoint.
 */
class CrashingSaver extends MemorySaver {
  crashed = false;
  override async put(...args: Parameters<MemorySaver['put']>) {
    if (this.crashed) throw new Error('crashed before the checkpoint was saved');
    return super.put(...args);
  }
  override async putWrites(...args: Parameters<MemorySaver['putWrites']>) {
    if (this.crashed) throw new Error('crashed before the writes were saved');
    return super.putWrites(...args);
  }
}

describe('LangGraph: approval through interrupt, decided in the outbox', () => {
  const shop = approvalShop();

  function agentFor(callId: string, orderId: number) {
    const model = new ChargingChatModel(callId, { order_id: orderId, amount: 5000 });
    const saver = new CrashingSaver();
    const agent = createReactAgent({
      llm: model,
      tools: [langChainTool(shop.definition, { approval: 'call', interrupt })],
      checkpointSaver: saver,
    });
    const config = { configurable: { thread_id: `thread-${orderId}` } };
    const start = () =>
      agent.invoke({ messages: [{ role: 'user', content: 'Charge the order.' }] }, config);
    const resume = (value: unknown) => agent.invoke(new Command({ resume: value }), config);
    const interrupts = async () =>
      (await agent.getState(config)).tasks.flatMap((t) => t.interrupts.map((i) => i.value));
    return { model, saver, start, resume, interrupts };
  }

  it('approve: interrupted, nothing written; approved in the outbox; resumed, written unheld once, also after a crash before the checkpoint', async () => {
    const run = agentFor('lc-approve', 1);
    await run.start();
    const [pause] = (await run.interrupts()) as { approvalId: string; stateRef: string }[];
    expect(pause).toMatchObject({
      type: 'outbox-call-approval',
      tool: 'charge_order',
      callId: 'lc-approve',
      stateRef: 'thread-1',
    });
    expect(await shop.charges(1)).toBe(0);

    await decideCallApproval(shop.executor, pause!.approvalId, {
      approve: true,
      by: 'alice',
      delivered: true,
    });
    // The resume crashes after the tool committed, before LangGraph saved anything.
    run.saver.crashed = true;
    await expect(run.resume(pause!.approvalId)).rejects.toThrow(/crashed/);
    expect(await shop.charges(1)).toBe(1);
    // Restarted: the thread is still at the interrupt; resuming runs the tool node again.
    run.saver.crashed = false;
    await run.resume(pause!.approvalId);
    expect(run.model.seen.at(-1)).toContain('"deduped":true');
    expect(await shop.charges(1)).toBe(1);
    expect(await shop.messages(1)).toEqual([{ approval_state: null }]);
  });

  it('deny: rejected in the outbox; resumed, the model reads the reason; nothing written', async () => {
    const run = agentFor('lc-deny', 2);
    await run.start();
    const [pause] = (await run.interrupts()) as { approvalId: string }[];
    await decideCallApproval(shop.executor, pause!.approvalId, {
      approve: false,
      by: 'bob',
      reason: 'customer disputes the amount',
      delivered: true,
    });
    await run.resume(pause!.approvalId);
    expect(run.model.seen.at(-1)).toContain('customer disputes the amount');
    expect(run.model.seen.at(-1)).toContain('"denied":true');
    expect(await shop.charges(2)).toBe(0);
    expect(await shop.messages(2)).toHaveLength(0);
  });

  it('expire: the callback gets the expiry once and resumes the thread; nothing written', async () => {
    const run = agentFor('lc-expire', 3);
    await run.start();
    await shop.backdate('lc-expire');
    const seen: CallDecision[] = [];
    const watcher = watchCallApprovals({
      executor: shop.executor,
      intervalMs: 60_000,
      onDecision: async (d) => {
        if (d.callId !== 'lc-expire') return;
        seen.push(d);
        await run.resume(d.approvalId);
      },
    });
    try {
      await watcher.poll();
      await watcher.poll();
    } finally {
      await watcher.stop();
    }
    expect(seen.map((d) => [d.state, d.stateRef])).toEqual([['expired', 'thread-3']]);
    expect(run.model.seen.at(-1)).toContain('"state":"expired"');
    expect(await shop.charges(3)).toBe(0);
  });

  it('a resume that says "approved" without the outbox writes nothing unheld', async () => {
    const run = agentFor('lc-forged', 4);
    await run.start();
    await run.resume({ approved: true });
    expect(await shop.charges(4)).toBe(1);
    expect(await shop.messages(4)).toEqual([{ approval_state: 'awaiting' }]);
  });

  it('an approval made by the CLI reaches the callback once', async () => {
    const run = agentFor('lc-cli', 5);
    await run.start();
    const [pause] = (await run.interrupts()) as { approvalId: string }[];
    const cli = await runCli(['approve', pause!.approvalId, '--by', 'erin'], {
      env: { DATABASE_URL: shop.db.url },
    });
    expect(cli.stdout).toContain(`approved ${pause!.approvalId} charge_order call lc-cli`);
    const seen: CallDecision[] = [];
    const watcher = watchCallApprovals({
      executor: shop.executor,
      intervalMs: 60_000,
      onDecision: async (d) => {
        if (d.callId !== 'lc-cli') return;
        seen.push(d);
        await run.resume(d.approvalId);
      },
    });
    try {
      await watcher.poll();
      await watcher.poll();
    } finally {
      await watcher.stop();
    }
    expect(seen.map((d) => [d.state, d.decidedBy])).toEqual([['approved', 'erin']]);
    expect(await shop.charges(5)).toBe(1);
    expect(await shop.messages(5)).toEqual([{ approval_state: null }]);
  });
});
