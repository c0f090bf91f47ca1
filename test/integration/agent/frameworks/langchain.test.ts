import { FakeStreamingChatModel } from '@langchain/core/utils/testing';
import { AIMessage, type BaseMessage } from '@langchain/core/messages';
import type { ChatResult } from '@langchain/core/outputs';
import { createReactAgent } from '@langchain/langgraph/prebuilt';
import { langChainEffectStatusTool, langChainTool } from '../../../../src/langchain/index.js';
import { callIdMaker, describeFramework, type Turn } from './scenarios.js';

/**
 * LangChain's fake streaming chat model, answering each call from the script instead of always
 * its first response (tool calls, then text). `bindTools` is the fake's own: it hands back a
 * copy, so the script position lives outside the instance.
 */
class ScriptedChatModel extends FakeStreamingChatModel {
  readonly idOf = callIdMaker();

  constructor(readonly script: { turns: Turn[]; step: number }) {
    super({});
  }

  override bindTools(): ReturnType<FakeStreamingChatModel['bindTools']> {
    return this as unknown as ReturnType<FakeStreamingChatModel['bindTools']>;
  }

  override async _generate(_messages: BaseMessage[]): Promise<ChatResult> {
    const step = this.script.step++;
    const turn = this.script.turns[step];
    const message = turn
      ? new AIMessage({
          content: '',
          tool_calls: turn.map((call, i) => ({
            id: this.idOf(step, i, call),
            name: call.name,
            args: call.args,
            type: 'tool_call' as const,
          })),
        })
      : new AIMessage({ content: 'Done.' });
    return { generations: [{ text: '', message }] };
  }
}

describeFramework('LangChain / LangGraph (@langchain/core 1)', (shop) => {
  const tools = [langChainTool(shop.definition), langChainEffectStatusTool(shop.status)];
  return async (turns) => {
    const agent = createReactAgent({
      llm: new ScriptedChatModel({ turns, step: 0 }),
      tools,
    });
    const state = await agent.invoke({
      messages: [{ role: 'user', content: 'Charge the order.' }],
    });
    return (state.messages as BaseMessage[])
      .filter((m) => m.getType() === 'tool')
      .map((m) => JSON.parse(m.content as string) as Record<string, unknown>);
  };
});
