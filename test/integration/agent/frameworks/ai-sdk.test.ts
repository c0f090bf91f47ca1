import { generateText, stepCountIs, type ToolSet } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { aiSdkEffectStatusTool, aiSdkTool } from '../../../../src/ai-sdk/index.js';
import { callIdMaker, describeFramework, type Turn } from './scenarios.js';

/** The AI SDK's mock model answering each step from the script: tool calls, then text. */
function scriptedModel(turns: Turn[]) {
  let step = 0;
  const idOf = callIdMaker();
  const usage = {
    inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: 1, text: 1, reasoning: undefined },
  };
  return new MockLanguageModelV3({
    doGenerate: async () => {
      const turn = turns[step++];
      if (!turn)
        return {
          content: [{ type: 'text', text: 'Done.' }],
          finishReason: { unified: 'stop', raw: undefined },
          usage,
          warnings: [],
        };
      return {
        content: turn.map((call, i) => ({
          type: 'tool-call' as const,
          toolCallId: idOf(step, i, call),
          toolName: call.name,
          input: JSON.stringify(call.args),
        })),
        finishReason: { unified: 'tool-calls', raw: undefined },
        usage,
        warnings: [],
      };
    },
  });
}

describeFramework('AI SDK (ai 6)', (shop) => {
  const tools: ToolSet = {
    charge_order: aiSdkTool(shop.definition),
    effect_status: aiSdkEffectStatusTool(shop.status),
  };
  return async (turns) => {
    const result = await generateText({
      model: scriptedModel(turns),
      tools,
      stopWhen: stepCountIs(turns.length + 1),
      prompt: 'Charge the order.',
    });
    return result.steps.flatMap((s) =>
      s.toolResults.map((r) => r.output as Record<string, unknown>),
    );
  };
});
