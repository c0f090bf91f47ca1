import {
  Agent,
  run,
  setTracingDisabled,
  Usage,
  type Model,
  type ModelResponse,
} from '@openai/agents';
import {
  openAiAgentsEffectStatusTool,
  openAiAgentsTool,
} from '../../../../src/openai-agents/index.js';
import { callIdMaker, describeFramework, type Turn } from './scenarios.js';

// The SDK's own tracing would export to OpenAI: off, offline.
setTracingDisabled(true);

/** A fake model (the SDK's `Model` interface) answering each turn from the script. */
class ScriptedModel implements Model {
  #step = 0;
  readonly #idOf = callIdMaker();
  constructor(readonly turns: Turn[]) {}

  async getResponse(): Promise<ModelResponse> {
    const turn = this.turns[this.#step++];
    if (!turn)
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
      output: turn.map((call, i) => ({
        type: 'function_call' as const,
        callId: this.#idOf(this.#step, i, call),
        name: call.name,
        arguments: JSON.stringify(call.args),
        status: 'completed' as const,
      })),
    };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error('not streamed in these tests');
  }
}

describeFramework(
  'OpenAI Agents SDK (@openai/agents 0.20)',
  (shop) => {
    const tools = [openAiAgentsTool(shop.definition), openAiAgentsEffectStatusTool(shop.status)];
    return async (turns) => {
      const agent = new Agent({
        name: 'shop',
        instructions: 'Charge orders.',
        model: new ScriptedModel(turns),
        tools,
      });
      const result = await run(agent, 'Charge the order.', { maxTurns: turns.length + 2 });
      return result.newItems
        .filter((item) => item.type === 'tool_call_output_item')
        .map((item) => {
          const output = (item as unknown as { output: unknown }).output;
          return JSON.parse(
            typeof output === 'string' ? output : (output as { text: string }).text,
          ) as Record<string, unknown>;
        });
    };
  },
  { nullForOmitted: true },
);
