/**
 * A tiny scripted stand-in for the Anthropic Messages API on 127.0.0.1, so the real `query()`
 * agent loop (which talks to the bundled Claude Code CLI, which talks to this server through
 * ANTHROPIC_BASE_URL) runs with no API key and no network. It answers `POST /v1/messages` with
 * the streaming SSE events the CLI expects: message_start, content_block_start/delta/stop,
 * message_delta, message_stop. What it says is decided by a script that sees the request.
 *
 * Not a model: it never looks at the prompt's meaning, only at the tools offered and the tool
 * results so far.
 */
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One block of a Messages API request's message content (only the fields the script reads). */
export interface RequestBlock {
  type: string;
  text?: string;
  name?: string;
  id?: string;
  tool_use_id?: string;
  input?: unknown;
  content?: string | { type: string; text?: string }[];
  is_error?: boolean;
}

/** The parts of a Messages API request a script looks at. */
export interface MessagesRequest {
  model: string;
  stream?: boolean;
  messages: { role: 'user' | 'assistant'; content: string | RequestBlock[] }[];
  tools?: { name: string }[];
}

/** What the scripted model answers: some text, then tool calls (if any). */
export interface ScriptedReply {
  text?: string;
  /** `id`: the `tool_use` id to send (default a fresh random one), e.g. to replay a call. */
  toolUses?: { name: string; input: Record<string, unknown>; id?: string }[];
}

/** Decides the reply to one request. */
export type Script = (request: MessagesRequest) => ScriptedReply;

/** A running fake API. */
export interface FakeMessagesApi {
  /** Base URL for ANTHROPIC_BASE_URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** Every `/v1/messages` request received, in order. */
  requests: MessagesRequest[];
  close(): Promise<void>;
}

/** A tool result the request carries back to the model. */
export interface ToolResultSeen {
  /** Its text blocks (outbox tools answer JSON first, then a sentence). */
  parts: string[];
  isError: boolean;
}

/** Tool results in a request, oldest first. */
export function toolResults(request: MessagesRequest): ToolResultSeen[] {
  const results: ToolResultSeen[] = [];
  for (const message of request.messages) {
    if (message.role !== 'user' || typeof message.content === 'string') continue;
    for (const block of message.content) {
      if (block.type !== 'tool_result') continue;
      const parts =
        typeof block.content === 'string'
          ? [block.content]
          : (block.content ?? []).map((part) => part.text ?? '');
      results.push({ parts, isError: block.is_error === true });
    }
  }
  return results;
}

function sse(res: ServerResponse, event: string, data: unknown): void {
  res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}

function id(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString('hex')}`;
}

function streamReply(res: ServerResponse, model: string, reply: ScriptedReply): void {
  res.writeHead(200, {
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    'request-id': id('req'),
  });
  const usage = { input_tokens: 10, output_tokens: 0 };
  sse(res, 'message_start', {
    type: 'message_start',
    message: {
      id: id('msg'),
      type: 'message',
      role: 'assistant',
      model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage,
    },
  });
  let index = 0;
  if (reply.text) {
    sse(res, 'content_block_start', {
      type: 'content_block_start',
      index,
      content_block: { type: 'text', text: '' },
    });
    sse(res, 'content_block_delta', {
      type: 'content_block_delta',
      index,
      delta: { type: 'text_delta', text: reply.text },
    });
    sse(res, 'content_block_stop', { type: 'content_block_stop', index });
    index++;
  }
  for (const use of reply.toolUses ?? []) {
    sse(res, 'content_block_start', {
      type: 'content_block_start',
      index,
      content_block: { type: 'tool_use', id: use.id ?? id('toolu'), name: use.name, input: {} },
    });
    sse(res, 'content_block_delta', {
      type: 'content_block_delta',
      index,
      delta: { type: 'input_json_delta', partial_json: JSON.stringify(use.input) },
    });
    sse(res, 'content_block_stop', { type: 'content_block_stop', index });
    index++;
  }
  sse(res, 'message_delta', {
    type: 'message_delta',
    delta: { stop_reason: reply.toolUses?.length ? 'tool_use' : 'end_turn', stop_sequence: null },
    usage: { output_tokens: 20 },
  });
  sse(res, 'message_stop', { type: 'message_stop' });
  res.end();
}

function nonStreamingReply(res: ServerResponse, model: string, reply: ScriptedReply): void {
  const content = [
    ...(reply.text ? [{ type: 'text', text: reply.text }] : []),
    ...(reply.toolUses ?? []).map((use) => ({
      type: 'tool_use',
      id: use.id ?? id('toolu'),
      name: use.name,
      input: use.input,
    })),
  ];
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(
    JSON.stringify({
      id: id('msg'),
      type: 'message',
      role: 'assistant',
      model,
      content,
      stop_reason: reply.toolUses?.length ? 'tool_use' : 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 20 },
    }),
  );
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Starts the fake API on 127.0.0.1 (a free port). `POST /v1/messages` is answered by `script`;
 * `count_tokens` gets a fixed count; anything else a 404 the CLI tolerates.
 */
export async function startFakeMessagesApi(script: Script): Promise<FakeMessagesApi> {
  const requests: MessagesRequest[] = [];
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0];
    readBody(req)
      .then((body) => {
        if (req.method === 'POST' && path === '/v1/messages/count_tokens') {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ input_tokens: 10 }));
          return;
        }
        if (req.method !== 'POST' || path !== '/v1/messages') {
          res.writeHead(404, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'fake' } }),
          );
          return;
        }
        const request = JSON.parse(body) as MessagesRequest;
        requests.push(request);
        const reply = script(request);
        if (request.stream) streamReply(res, request.model, reply);
        else nonStreamingReply(res, request.model, reply);
      })
      .catch((error: unknown) => {
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({ type: 'error', error: { type: 'api_error', message: String(error) } }),
        );
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
