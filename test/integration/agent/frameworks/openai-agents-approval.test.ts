/**
 * Issue 42, OpenAI Agents SDK 0.20: `openAiAgentsTool(def, { approval: 'call' })` interrupts a
 * call through the SDK's own `needsApproval` (`result.interruptions`), the run is saved as a
 * string (`RunState`), the person's decision is recorded in the outbox, and
 * `openAiAgentsApplyDecisions` approves or rejects the restored state from it. Through `run()`
 * with a fake model, on Postgres.
 */
import {
  Agent,
  run,
  RunState,
  setTracingDisabled,
  Usage,
  type Model,
  type ModelRequest,
  type ModelResponse,
} from '@openai/agents';
import { describe, expect, it } from 'vitest';
import {
  decideCallApproval,
  openAiAgentsApplyDecisions,
  openAiAgentsTool,
  watchCallApprovals,
  type CallDecision,
} from '../../../../src/openai-agents/index.js';
import { runCli } from '../../../helpers/run-cli.js';
import { approvalShop } from './call-approval-fixture.js';

setTracingDisabled(true);

/** Calls `charge_order` once with `callId`; once the input holds a result for it, answers text. */
class ChargingModel implements Model {
  readonly inputs: string[] = [];
  constructor(
    readonly callId: string,
    readonly args: { order_id: number; amount: number },
  ) {}

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    const input = JSON.stringify(request.input);
    this.inputs.push(input);
    if (input.includes('function_call_result'))
      return {
        usage: new Usage(),
        output: [
          {
            type: 'message',
            role: 'assistant',
            status: 'completed',
            content: [{ type: 'output_text', text: 'Done.' }],
          },
        ],
      };
    return {
      usage: new Usage(),
      output: [
        {
          type: 'function_call',
          callId: this.callId,
          name: 'charge_order',
          arguments: JSON.stringify(this.args),
          status: 'completed',
        },
      ],
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error('not streamed in these tests');
  }
}

describe('OpenAI Agents SDK: approval through needsApproval and RunState, decided in the outbox', () => {
  const shop = approvalShop();

  function agentFor(callId: string, orderId: number, amount = 5000) {
    const model = new ChargingModel(callId, { order_id: orderId, amount });
    const agent = new Agent<{ runId: string }>({
      name: 'shop',
      instructions: 'Charge orders.',
      model,
      tools: [
        openAiAgentsTool(shop.definition, {
          approval: 'call',
          stateRef: (context) => (context as { runId: string }).runId,
        }),
      ],
    });
    return { agent, model };
  }

  /** The first run: interrupted; returns the state string the app saved. */
  async function pausedRun(agent: Agent<{ runId: string }>, runId: string) {
    const result = await run(agent, 'Charge the order.', { context: { runId }, maxTurns: 4 });
    return { saved: result.state.toString(), interruptions: result.interruptions };
  }

  /** Restores the saved state, answers it from the outbox, runs on. */
  async function resume(agent: Agent<{ runId: string }>, saved: string) {
    const state = await RunState.fromString(agent, saved);
    const applied = await openAiAgentsApplyDecisions(shop.executor, state);
    const result = await run(agent, state, { maxTurns: 4 });
    return { applied, result };
  }

  it('approve: interrupted, nothing written; approved in the outbox; runs unheld once, also when resumed again after a crash', async () => {
    const { agent, model } = agentFor('oa-approve', 1);
    const { saved, interruptions } = await pausedRun(agent, 'run-1');
    expect(interruptions).toHaveLength(1);
    expect(await shop.charges(1)).toBe(0);
    const asked = await shop.approval('oa-approve');
    expect(asked).toMatchObject({ state: 'awaiting', state_ref: 'run-1' });

    // Undecided: the helper leaves the interruption alone.
    const early = await RunState.fromString(agent, saved);
    expect(await openAiAgentsApplyDecisions(shop.executor, early)).toEqual({
      approved: [],
      rejected: [],
      waiting: ['oa-approve'],
    });

    await decideCallApproval(shop.executor, `call-${asked!.id}`, {
      approve: true,
      by: 'alice',
      delivered: true,
    });
    const first = await resume(agent, saved);
    expect(first.applied.approved).toEqual(['oa-approve']);
    expect(first.result.finalOutput).toBe('Done.');
    expect(await shop.charges(1)).toBe(1);
    expect(await shop.messages(1)).toEqual([{ approval_state: null }]);

    // The app crashed after the tool committed, before it saved the new state: it resumes from
    // the state it had saved; the SDK runs the approved call again, with the same call id.
    await resume(agent, saved);
    expect(model.inputs.at(-1)).toContain('\\"deduped\\":true');
    expect(await shop.charges(1)).toBe(1);
    expect(await shop.messages(1)).toHaveLength(1);
  });

  it('deny: rejected in the outbox; the state rejects it with the reason; nothing written', async () => {
    const { agent, model } = agentFor('oa-deny', 2);
    const { saved } = await pausedRun(agent, 'run-2');
    const asked = await shop.approval('oa-deny');
    await decideCallApproval(shop.executor, `call-${asked!.id}`, {
      approve: false,
      by: 'bob',
      reason: 'customer disputes the amount',
      delivered: true,
    });
    const { applied } = await resume(agent, saved);
    expect(applied.rejected).toEqual(['oa-deny']);
    expect(model.inputs.at(-1)).toContain('rejected by bob: customer disputes the amount');
    expect(await shop.charges(2)).toBe(0);
    expect(await shop.messages(2)).toHaveLength(0);
  });

  it('expire: the callback gets the expiry once; the state rejects it as expired; nothing written', async () => {
    const { agent, model } = agentFor('oa-expire', 3);
    const { saved } = await pausedRun(agent, 'run-3');
    await shop.backdate('oa-expire');
    const seen: CallDecision[] = [];
    const watcher = watchCallApprovals({
      executor: shop.executor,
      intervalMs: 60_000,
      onDecision: async (d) => {
        if (d.callId !== 'oa-expire') return;
        seen.push(d);
        await resume(agent, saved); // the app resumes the run its stateRef names
      },
    });
    try {
      await watcher.poll();
      await watcher.poll();
    } finally {
      await watcher.stop();
    }
    expect(seen.map((d) => [d.state, d.stateRef])).toEqual([['expired', 'run-3']]);
    expect(model.inputs.at(-1)).toContain('expired: no decision');
    expect(await shop.charges(3)).toBe(0);
  });

  it('a state approved without the outbox writes nothing unheld', async () => {
    const { agent } = agentFor('oa-forged', 4);
    const { saved } = await pausedRun(agent, 'run-4');
    const state = await RunState.fromString(agent, saved);
    for (const item of state.getInterruptions()) state.approve(item);
    await run(agent, state, { maxTurns: 4 });
    expect(await shop.charges(4)).toBe(1);
    expect(await shop.messages(4)).toEqual([{ approval_state: 'awaiting' }]);
  });

  it('a rejection made by the CLI reaches the callback once', async () => {
    const { agent, model } = agentFor('oa-cli', 5);
    const { saved } = await pausedRun(agent, 'run-5');
    const asked = await shop.approval('oa-cli');
    const cli = await runCli(
      ['reject', `call-${asked!.id}`, '--by', 'dave', '--reason', 'not this customer'],
      { env: { DATABASE_URL: shop.db.url } },
    );
    expect(cli.stdout).toContain(`rejected call-${asked!.id} charge_order call oa-cli`);
    const seen: CallDecision[] = [];
    const watcher = watchCallApprovals({
      executor: shop.executor,
      intervalMs: 60_000,
      onDecision: async (d) => {
        if (d.callId !== 'oa-cli') return;
        seen.push(d);
        await resume(agent, saved);
      },
    });
    try {
      await watcher.poll();
      await watcher.poll();
    } finally {
      await watcher.stop();
    }
    expect(seen.map((d) => [d.state, d.decidedBy, d.stateRef])).toEqual([
      ['rejected', 'dave', 'run-5'],
    ]);
    expect(model.inputs.at(-1)).toContain('not this customer');
    expect(await shop.charges(5)).toBe(0);
  });
});
