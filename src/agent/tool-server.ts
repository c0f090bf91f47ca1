import {
  createSdkMcpServer,
  type McpSdkServerConfigWithInstance,
  type SdkMcpToolDefinition,
} from '@anthropic-ai/claude-agent-sdk';

/** Options of {@link createToolServer}. */
export interface ToolServerOptions {
  /** Server name; the model sees tools as `mcp__<name>__<tool>` (list those in `allowedTools`). */
  name: string;
  /** Server version reported to MCP clients. Default `1.0.0`. */
  version?: string;
  // The SDK's own option type uses `any` here: its tools differ in input shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  tools: readonly SdkMcpToolDefinition<any>[];
}

/**
 * Builds a NEW in-process MCP server for the tools on every call. Call it once per `query()` (or
 * per MCP client): one server instance shared by concurrent sessions silently loses its tools.
 * Tool definitions themselves are plain values and can be shared.
 *
 * @example
 * ```ts
 * for await (const message of query({
 *   prompt,
 *   options: {
 *     mcpServers: { shop: createToolServer({ name: 'shop', tools: [createOrder] }) },
 *     allowedTools: ['mcp__shop__create_order'],
 *   },
 * })) { ... }
 * ```
 */
export function createToolServer(options: ToolServerOptions): McpSdkServerConfigWithInstance {
  return createSdkMcpServer({
    name: options.name,
    version: options.version ?? '1.0.0',
    tools: [...options.tools],
  });
}
