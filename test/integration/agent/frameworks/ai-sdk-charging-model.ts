import { MockLanguageModelV3 } from 'ai/test';

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

/**
 * A mock model that calls `charge_order` once (with `callId`) and then, once the prompt holds
 * that call's result, answers in text. `prompts` keeps every prompt it got (what the model read).
 */
export function chargingModel(callId: string, args: { order_id: number; amount: number }) {
  const prompts: unknown[] = [];
  const model = new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      prompts.push(prompt);
      const answered = JSON.stringify(prompt).includes('"type":"tool-result"');
      if (answered)
        return {
          content: [{ type: 'text', text: 'Done.' }],
          finishReason: { unified: 'stop', raw: undefined },
          usage,
          warnings: [],
        };
      return {
        content: [
          {
            type: 'tool-call' as const,
            toolCallId: callId,
            toolName: 'charge_order',
            input: JSON.stringify(args),
          },
        ],
        finishReason: { unified: 'tool-calls', raw: undefined },
        usage,
        warnings: [],
      };
    },
  });
  return { model, prompts };
}
