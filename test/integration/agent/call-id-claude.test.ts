/**
 * Issue 42 through the Agent SDK's real `query()` loop (the bundled Claude Code CLI against the
 * scripted fake Messages API), on Postgres: with no `idempotency_key` in the input and no hook,
 * the model's `tool_use` id (which the in-process MCP server receives in `_meta` as
 * `claudecode/toolUseId`) is the key. A session that crashed after the tool committed and is
 * resumed replays the same `tool_use`: answered from the first run, written once.
 */
import { createSdkMcpServer, query } from '@anthropic-ai/claude-agent-sdk';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  startFakeMessagesApi,
  toolResults,
  type FakeMessagesApi,
} from '../../../examples/demo/fake-messages-api.js';
import { pgPoolTransactions } from '../../../src/agent/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { NOTES_TABLE_SQL, notesTool } from './notes-tool.js';

const TOOL = 'mcp__notes__add_note';

describe('Claude Agent SDK: the tool_use id is the default idempotency key', () => {
  let db: TestDatabase;
  let scratch: string;
  let api: FakeMessagesApi;
  /** The tool answers the fake model read back, parsed, in order. */
  const answers: Record<string, unknown>[] = [];

  beforeAll(async () => {
    db = await createTestDatabase();
    await db.pool.query(NOTES_TABLE_SQL);
    scratch = await mkdtemp(join(tmpdir(), 'ao-call-id-'));
    api = await startFakeMessagesApi((request) => {
      const results = toolResults(request);
      if (results.length > 0) {
        answers.push(JSON.parse(results[0]!.parts[0]!) as Record<string, unknown>);
        return { text: 'Noted.' };
      }
      // No idempotency_key: the model leaves it out, and no hook fills it.
      return { toolUses: [{ name: TOOL, input: { body: 'call the supplier' }, id: 'toolu_42' }] };
    });
  });
  afterAll(async () => {
    await api.close();
    await db.drop();
    await rm(scratch, { recursive: true, force: true });
  });

  const session = async () => {
    for await (const message of query({
      prompt: 'Note: call the supplier.',
      options: {
        mcpServers: {
          notes: createSdkMcpServer({
            name: 'notes',
            version: '1.0.0',
            tools: [notesTool(pgPoolTransactions(db.pool))],
          }),
        },
        allowedTools: [TOOL],
        tools: [],
        settingSources: [],
        persistSession: false,
        maxTurns: 4,
        cwd: scratch,
        env: {
          PATH: process.env.PATH,
          HOME: scratch,
          ANTHROPIC_BASE_URL: api.url,
          ANTHROPIC_API_KEY: 'fake-key',
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        },
      },
    }))
      void message;
  };

  it(
    'the same tool_use run again (a resumed session) writes once and answers the first result',
    {
      timeout: 120_000,
    },
    async () => {
      await session();
      await session();

      expect(answers).toHaveLength(2);
      expect(answers[0]).toMatchObject({ ok: true, deduped: false, result: { noteId: 1 } });
      expect(answers[1]).toMatchObject({ ok: true, deduped: true, result: { noteId: 1 } });
      const notes = await db.pool.query('SELECT id FROM notes');
      expect(notes.rows).toHaveLength(1);
      const messages = await db.pool.query('SELECT topic FROM outbox');
      expect(messages.rows).toHaveLength(2);
      const keys = await db.pool.query<{ tool: string; idempotency_key: string }>(
        'SELECT tool, idempotency_key FROM outbox_tool_calls',
      );
      expect(keys.rows).toEqual([{ tool: 'add_note', idempotency_key: 'toolu_42' }]);
    },
  );
});
