import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  connectInMemory,
  createToolServer,
  outboxTool,
  type InMemoryToolClient,
} from '../../../src/agent/index.js';
import { resultJson } from '../agent/notes-tool.js';
import { count, type OrmContext } from './orm-harness.js';

/**
 * An `outboxTool` on one ORM's agent transaction runner, called through a real MCP client: the
 * note is written through the ORM's own transaction object (`trx`), its messages through the
 * bound outbox, and the idempotency key and stored result through the runner's executor.
 */
export function describeAgentContract<Trx>(name: string, context: () => OrmContext<Trx>): void {
  describe(`outboxTool on ${name} transactions`, () => {
    let mcp: InMemoryToolClient;

    beforeAll(async () => {
      const { orm } = context();
      const tool = outboxTool({
        name: 'add_note',
        description: 'Stores a note and queues its notifications.',
        input: { body: z.string().min(1), fail_midway: z.boolean().optional() },
        transactions: orm.agentTransactions,
        handler: async (input, { trx, outbox, ctx }) => {
          const id = await orm.insertNote(trx, { body: input.body, traceId: ctx.traceId });
          await outbox.enqueue([
            { topic: 'note.index', aggregateId: `note:${id}`, payload: { id } },
            { topic: 'mail.send', aggregateId: `note:${id}`, payload: { id, body: input.body } },
          ]);
          if (input.fail_midway) throw new Error('search index down');
          return { noteId: id, body: input.body };
        },
      });
      mcp = await connectInMemory(createToolServer({ name: 'notes', tools: [tool] }));
    });
    afterAll(() => mcp?.close());

    const call = (args: Record<string, unknown>) =>
      mcp.client.callTool({ name: 'add_note', arguments: args });

    it('commits the note and both messages together', async () => {
      const { db } = context();
      const result = await call({ body: 'first', idempotency_key: 'k-commit' });
      expect(result.isError).toBeFalsy();
      const json = resultJson(result);
      expect(json).toMatchObject({ ok: true, deduped: false, result: { body: 'first' } });
      const noteId = json.result.noteId as number;
      expect(await count(db, 'notes', 'id = $1 AND body = $2', [noteId, 'first'])).toBe(1);
      expect(await count(db, 'outbox', 'aggregate_id = $1', [`note:${noteId}`])).toBe(2);
    });

    it('a repeated key writes nothing and answers the first result, stored as jsonb', async () => {
      const { db } = context();
      const first = resultJson(await call({ body: 'dup', idempotency_key: 'k-dup' }));
      const outboxBefore = await count(db, 'outbox');
      const again = resultJson(await call({ body: 'dup changed', idempotency_key: 'k-dup' }));
      expect(again).toEqual({ ok: true, deduped: true, result: first.result });
      expect(await count(db, 'notes', "body LIKE 'dup%'")).toBe(1);
      expect(await count(db, 'outbox')).toBe(outboxBefore);
      // The result is a jsonb object (not a JSON string holding one).
      expect(
        await count(
          db,
          'outbox_tool_calls',
          "idempotency_key = 'k-dup' AND jsonb_typeof(result) = 'object'",
        ),
      ).toBe(1);
    });

    it('a throw midway rolls back the note, the messages and the key; the key then succeeds', async () => {
      const { db } = context();
      const outboxBefore = await count(db, 'outbox');
      const failed = await call({ body: 'boom', fail_midway: true, idempotency_key: 'k-fail' });
      expect(failed.isError).toBe(true);
      expect(await count(db, 'notes', "body = 'boom'")).toBe(0);
      expect(await count(db, 'outbox')).toBe(outboxBefore);
      expect(await count(db, 'outbox_tool_calls', "idempotency_key = 'k-fail'")).toBe(0);

      const retried = resultJson(await call({ body: 'boom', idempotency_key: 'k-fail' }));
      expect(retried).toMatchObject({ ok: true, deduped: false });
      expect(await count(db, 'notes', "body = 'boom'")).toBe(1);
      expect(await count(db, 'outbox')).toBe(outboxBefore + 2);
    });
  });
}
