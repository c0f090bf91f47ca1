import { z } from 'zod';
import { outboxTool, type TransactionRunner } from '../../../src/agent/index.js';

/**
 * A small tool for the helper's tests: writes a note row and two outbox messages, then optionally
 * throws (after everything was written) or waits on a gate the test opens.
 */
export function notesTool<Trx>(
  transactions: TransactionRunner<Trx>,
  hooks: { beforeReturn?: (body: string) => Promise<void> } = {},
) {
  return outboxTool({
    name: 'add_note',
    description: 'Stores a note and queues its notifications.',
    input: { body: z.string().min(1), fail_midway: z.boolean().optional() },
    transactions,
    handler: async (input, { tx, outbox, ctx }) => {
      const { rows } = await tx.query<{ id: number }>(
        'INSERT INTO notes (body, trace_id) VALUES ($1, $2) RETURNING id',
        [input.body, ctx.traceId],
      );
      const id = rows[0]!.id;
      await outbox.enqueue([
        { topic: 'note.index', aggregateId: `note:${id}`, payload: { id } },
        { topic: 'mail.send', aggregateId: `note:${id}`, payload: { id, body: input.body } },
      ]);
      if (input.fail_midway) {
        throw new Error('search index down; password=hunter2 rejected');
      }
      await hooks.beforeReturn?.(input.body);
      return { noteId: id };
    },
    summarize: (result) => `Note ${result.noteId} stored.`,
  });
}

export const NOTES_TABLE_SQL =
  'CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL, trace_id text NOT NULL)';

/** Parses the JSON block of a tool result. */
export function resultJson(result: unknown): Record<string, any> {
  const content = (result as { content: { type: string; text: string }[] }).content;
  return JSON.parse(content[0]!.text) as Record<string, any>;
}

/** The plain-words block of a tool result. */
export function resultWords(result: unknown): string {
  const content = (result as { content: { type: string; text: string }[] }).content;
  return content[1]?.text ?? content[0]!.text;
}
