import type { McpSdkServerConfigWithInstance } from '@anthropic-ai/claude-agent-sdk';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';

/** An MCP client connected to an in-process tool server. */
export interface InMemoryToolClient {
  /** The MCP client: `listTools()`, `callTool({ name, arguments, _meta })`. */
  client: Client;
  /** Closes the client and the server's side of the transport. */
  close(): Promise<void>;
}

/**
 * Connects a real MCP `Client` to a server from {@link createToolServer} over a linked in-memory
 * transport: the same tools/list and tools/call protocol the agent loop uses, without a process
 * or a model. For tests and scripted agents. The server must be new (not yet connected).
 *
 * @example
 * ```ts
 * const { client, close } = await connectInMemory(createToolServer({ name: 'shop', tools }));
 * await client.callTool({ name: 'create_order', arguments: { ..., idempotency_key: 'req-1' } });
 * await close();
 * ```
 */
export async function connectInMemory(
  server: McpSdkServerConfigWithInstance,
  clientInfo: { name: string; version: string } = { name: 'agent-outbox', version: '1.0.0' },
): Promise<InMemoryToolClient> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.instance.connect(serverSide);
  const client = new Client(clientInfo);
  await client.connect(clientSide);
  return {
    client,
    close: async () => {
      await client.close();
      await server.instance.close();
    },
  };
}
