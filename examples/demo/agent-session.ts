/**
 * Runs the orders tools through the Agent SDK's real `query()` loop (the bundled Claude Code CLI
 * as a child process), against the real API or the scripted fake one. Used by
 * `npm run demo:agent` and by the end-to-end test.
 */
import { query } from '@anthropic-ai/claude-agent-sdk';
import { idempotencyKeyHook } from '../../src/agent/index.js';
import { ORDERS_SERVER_NAME, type OrdersExample } from '../orders/index.js';
import { toolResults, type Script } from './fake-messages-api.js';
import { emptyTally, tallyToolAnswer, type ToolCallTally } from './report.js';

/** The tools as the model sees them; only these may run (`allowedTools`). */
export const ORDER_TOOLS = {
  create: `mcp__${ORDERS_SERVER_NAME}__create_order`,
  refund: `mcp__${ORDERS_SERVER_NAME}__refund_order`,
  status: `mcp__${ORDERS_SERVER_NAME}__effect_status`,
} as const;

/**
 * The outbox tools whose `idempotency_key` the application sets (the library's
 * `idempotencyKeyHook`, from the request id): not the read-only status tool.
 */
export const KEYED_TOOLS = [ORDER_TOOLS.create, ORDER_TOOLS.refund];

/** The prompt; the real model follows it, the scripted one acts it out. */
export const ORDERS_PROMPT = [
  'You operate a shop through the orders tools. Do these steps one tool call at a time:',
  '1. Create an order for user u-alice (alice@example.com): 1200 JPY.',
  '2. Create an order for user u-bob (bob@example.com): 25 USD.',
  '3. You did not hear back in time about step 1: call create_order for it again with exactly the same arguments.',
  '4. Create an order for user u-carol (carol@example.com): 4800 JPY. If it fails, try once more.',
  "5. Refund bob's order (reason: customer cancelled).",
  'Then say in one sentence what you did. Put any string in idempotency_key; the application replaces it.',
].join('\n');

function order(user: string, amount: number, currency: string, modelKey: string) {
  return {
    user_id: `u-${user}`,
    email: `${user}@example.com`,
    amount,
    currency,
    // What a model typically does: invent a key per call. The hook replaces it.
    idempotency_key: modelKey,
  };
}

/**
 * The scripted model behind the fake Messages API: acts out {@link ORDERS_PROMPT} one tool call
 * per turn, reading earlier tool results (bob's order id) like a model would. Requests that do
 * not offer our tools (the CLI's side requests) get a short text.
 */
export function scriptedOrdersModel(): Script {
  return (request) => {
    const offered = new Set((request.tools ?? []).map((t) => t.name));
    if (!offered.has(ORDER_TOOLS.create)) return { text: 'OK.' };
    const results = toolResults(request);
    const orderIdOf = (index: number) => {
      const json = JSON.parse(results[index]?.parts[0] ?? '{}') as {
        result?: { orderId?: number };
      };
      return json.result?.orderId;
    };
    switch (results.length) {
      case 0:
        return {
          toolUses: [{ name: ORDER_TOOLS.create, input: order('alice', 1200, 'JPY', 'k-1') }],
        };
      case 1:
        return { toolUses: [{ name: ORDER_TOOLS.create, input: order('bob', 25, 'USD', 'k-2') }] };
      case 2:
        // Step 3: the same order again — with a DIFFERENT model-made key.
        return {
          text: 'No answer for the first order yet; trying again.',
          toolUses: [{ name: ORDER_TOOLS.create, input: order('alice', 1200, 'JPY', 'k-3') }],
        };
      case 3:
        return {
          toolUses: [{ name: ORDER_TOOLS.create, input: order('carol', 4800, 'JPY', 'k-4') }],
        };
      case 4:
        if (results[3]?.isError)
          return {
            text: 'That failed; trying once more.',
            toolUses: [{ name: ORDER_TOOLS.create, input: order('carol', 4800, 'JPY', 'k-5') }],
          };
        return { text: 'Unexpected: carol’s order did not fail.', toolUses: [] };
      case 5:
        return {
          toolUses: [
            {
              name: ORDER_TOOLS.refund,
              input: {
                order_id: orderIdOf(1),
                reason: 'customer cancelled',
                idempotency_key: 'k-6',
              },
            },
          ],
        };
      default:
        return {
          text: 'Created orders for alice, bob and carol (alice once, despite the repeat), and refunded bob.',
        };
    }
  };
}

/** Options of {@link runOrdersAgent}. */
export interface RunOrdersAgentOptions {
  example: OrdersExample;
  /** The application's id of this user request: the base of every idempotency key. */
  requestId: string;
  prompt?: string;
  /** Environment of the CLI process (REPLACES process.env): PATH, HOME, ANTHROPIC_*. */
  env: Record<string, string | undefined>;
  /** Working directory of the CLI. */
  cwd: string;
  model?: string;
  /** Tools the loop may run; default both order tools. */
  allowedTools?: readonly string[];
  log?: (line: string) => void;
}

/** What the agent loop did. */
export interface AgentRun {
  tally: ToolCallTally;
  /** The result message's subtype — reported, never trusted: a denied tool also ends 'success'. */
  subtype: string | undefined;
  finalText: string;
}

interface ContentBlock {
  type: string;
  id?: string;
  name?: string;
  text?: string;
  tool_use_id?: string;
  content?: unknown;
  is_error?: boolean;
}

/** Runs one `query()` with a NEW tool server, the key hook, and only our tools allowed. */
export async function runOrdersAgent(options: RunOrdersAgentOptions): Promise<AgentRun> {
  const log = options.log ?? (() => undefined);
  const tally = emptyTally();
  const names = new Map<string, string>();
  let subtype: string | undefined;
  let finalText = '';
  for await (const message of query({
    prompt: options.prompt ?? ORDERS_PROMPT,
    options: {
      mcpServers: { [ORDERS_SERVER_NAME]: options.example.createServer() },
      allowedTools: [...(options.allowedTools ?? Object.values(ORDER_TOOLS))],
      tools: [], // no built-in tools (Bash, Read, ...): this agent only places orders
      settingSources: [],
      persistSession: false,
      maxTurns: 20,
      cwd: options.cwd,
      env: options.env,
      ...(options.model ? { model: options.model } : {}),
      hooks: {
        PreToolUse: [
          idempotencyKeyHook({
            requestId: options.requestId,
            tools: KEYED_TOOLS,
            onKey: (tool, key) => log(`[hook]  ${tool}: idempotency_key := ${key}`),
          }),
        ],
      },
    },
  })) {
    if (message.type === 'assistant') {
      for (const block of message.message.content as ContentBlock[]) {
        if (block.type === 'tool_use' && block.id) names.set(block.id, block.name ?? '?');
        if (block.type === 'text' && block.text) log(`[model] ${block.text}`);
      }
    } else if (message.type === 'user' && Array.isArray(message.message.content)) {
      for (const block of message.message.content as ContentBlock[]) {
        if (block.type !== 'tool_result') continue;
        const { kind, json } = tallyToolAnswer(tally, {
          content: block.content,
          isError: block.is_error,
        });
        const detail =
          kind === 'failed'
            ? String(json.error ?? block.content)
            : JSON.stringify(json.result ?? null);
        log(`[agent] ${names.get(block.tool_use_id ?? '') ?? 'tool'} → ${kind}: ${detail}`);
      }
    } else if (message.type === 'result') {
      subtype = message.subtype;
      if (message.subtype === 'success') finalText = message.result;
    }
  }
  return { tally, subtype, finalText };
}
