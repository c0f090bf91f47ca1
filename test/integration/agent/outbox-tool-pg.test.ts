import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectInMemory,
  createToolServer,
  pgPoolTransactions,
  type InMemoryToolClient,
} from '../../../src/agent/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { NOTES_TABLE_SQL, notesTool, resultJson, resultWords } from './notes-tool.js';

let db: TestDatabase;
let mcp: InMemoryToolClient;
/** Gates the handler of bodies starting with "gated": the test decides when it may finish. */
const gates = new Map<string, { entered: () => void; release: Promise<void> }>();

beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query(NOTES_TABLE_SQL);
  const tool = notesTool(pgPoolTransactions(db.pool), {
    beforeReturn: async (body) => {
      const gate = gates.get(body);
      if (!gate) return;
      gate.entered();
      await gate.release;
    },
  });
  mcp = await connectInMemory(createToolServer({ name: 'notes', tools: [tool] }));
});
afterAll(async () => {
  await mcp?.close();
  await db?.drop();
});

const count = async (table: string, where = 'true', values: unknown[] = []) =>
  (
    await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM ${table} WHERE ${where}`,
      values,
    )
  ).rows[0]!.n;

const call = (args: Record<string, unknown>, meta?: Record<string, unknown>) =>
  mcp.client.callTool({ name: 'add_note', arguments: args, ...(meta ? { _meta: meta } : {}) });

describe('outboxTool on a pg Pool, through a real MCP client', () => {
  it('lists the tool with the idempotency key in its input schema, optional', async () => {
    const { tools } = await mcp.client.listTools();
    expect(tools.map((t) => t.name)).toEqual(['add_note']);
    expect(Object.keys(tools[0]!.inputSchema.properties ?? {})).toContain('idempotency_key');
    expect(tools[0]!.inputSchema.required).toEqual(['body']);
  });

  it('without idempotency_key the tool_use id in _meta is the key; without either nothing is written', async () => {
    const meta = { 'claudecode/toolUseId': 'toolu_pg_1' };
    const first = resultJson(await call({ body: 'by call id' }, meta));
    const again = resultJson(await call({ body: 'by call id' }, meta));
    expect(first).toMatchObject({ ok: true, deduped: false });
    expect(again).toMatchObject({ ok: true, deduped: true, result: first.result });
    expect(await count('notes', 'body = $1', ['by call id'])).toBe(1);

    const none = await call({ body: 'no key at all' });
    expect(none.isError).toBe(true);
    expect(resultJson(none).error).toMatch(/no idempotency key/);
    expect(await count('notes', 'body = $1', ['no key at all'])).toBe(0);
  });

  it('commits the row and both messages, and says so', async () => {
    const result = await call({ body: 'first', idempotency_key: 'k-commit' });
    expect(result.isError).toBeFalsy();
    const json = resultJson(result);
    expect(json).toMatchObject({
      ok: true,
      deduped: false,
      result: { noteId: expect.any(Number) },
    });
    expect(json.queued.map((q: { topic: string }) => q.topic)).toEqual(['note.index', 'mail.send']);
    expect(resultWords(result)).toMatch(/Note \d+ stored\. Saved in one transaction .* 2 queued/);
    expect(await count('notes', 'body = $1', ['first'])).toBe(1);
    expect(await count('outbox', `aggregate_id = $1`, [`note:${json.result.noteId}`])).toBe(2);
  });

  it('a repeated key writes nothing and answers deduped with the first result', async () => {
    const first = resultJson(await call({ body: 'dup', idempotency_key: 'k-dup' }));
    const outboxBefore = await count('outbox');
    const again = await call({ body: 'dup changed', idempotency_key: 'k-dup' });
    expect(again.isError).toBeFalsy();
    expect(resultJson(again)).toEqual({ ok: true, deduped: true, result: first.result });
    expect(await count('notes', "body LIKE 'dup%'")).toBe(1);
    expect(await count('outbox')).toBe(outboxBefore);
  });

  it('a throw midway rolls back row, messages and key; the same key then succeeds', async () => {
    const outboxBefore = await count('outbox');
    const failed = await call({ body: 'boom', fail_midway: true, idempotency_key: 'k-fail' });
    expect(failed.isError).toBe(true);
    expect(resultJson(failed)).toMatchObject({ ok: false });
    expect(resultWords(failed)).toMatch(/nothing was saved/);
    expect(resultWords(failed)).toMatch(/search index down/);
    expect(JSON.stringify(failed)).not.toContain('hunter2');
    expect(await count('notes', "body = 'boom'")).toBe(0);
    expect(await count('outbox')).toBe(outboxBefore);
    expect(await count('outbox_tool_calls', "idempotency_key = 'k-fail'")).toBe(0);

    const retried = await call({ body: 'boom', idempotency_key: 'k-fail' });
    expect(resultJson(retried)).toMatchObject({ ok: true, deduped: false });
    expect(await count('notes', "body = 'boom'")).toBe(1);
  });

  it('invalid input is an error result and writes nothing', async () => {
    const before = await count('outbox');
    const missingKey = await call({ body: 'no key' });
    expect(missingKey.isError).toBe(true);
    const badType = await call({ body: 42, idempotency_key: 'k-bad' });
    expect(badType.isError).toBe(true);
    expect(await count('outbox')).toBe(before);
    expect(await count('notes', "body = 'no key'")).toBe(0);
  });

  it('a concurrent duplicate waits for the first call, then answers deduped', async () => {
    let entered!: () => void;
    const enteredPromise = new Promise<void>((resolve) => (entered = resolve));
    let release!: () => void;
    gates.set('gated', { entered, release: new Promise<void>((resolve) => (release = resolve)) });

    const first = call({ body: 'gated', idempotency_key: 'k-race' });
    await enteredPromise; // the first call holds the uncommitted key row now
    const second = call({ body: 'gated', idempotency_key: 'k-race' });
    // Proof that the second call is blocked on the first's key row, not merely slower.
    await waitUntil(
      async () =>
        (await count(
          'pg_stat_activity',
          "wait_event_type = 'Lock' AND datname = current_database()",
        )) > 0,
    );
    release();

    const [a, b] = await Promise.all([first, second]);
    expect(resultJson(a)).toMatchObject({ ok: true, deduped: false });
    expect(resultJson(b)).toMatchObject({ ok: true, deduped: true });
    expect(await count('notes', "body = 'gated'")).toBe(1);
  });

  it('takes the caller W3C traceparent from _meta and writes it to every message', async () => {
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const result = resultJson(
      await call({ body: 'traced', idempotency_key: 'k-trace' }, { traceparent }),
    );
    const { rows } = await db.pool.query<{ headers: Record<string, string> }>(
      'SELECT headers FROM outbox WHERE aggregate_id = $1 ORDER BY sequence',
      [`note:${result.result.noteId}`],
    );
    expect(rows.map((r) => r.headers.traceparent)).toEqual([traceparent, traceparent]);
    expect(
      await count('notes', "body = 'traced' AND trace_id = '4bf92f3577b34da6a3ce929d0e0e4736'"),
    ).toBe(1);
  });

  it('generates a trace id when the caller sends none (or an invalid one)', async () => {
    const result = resultJson(
      await call({ body: 'untraced', idempotency_key: 'k-notrace' }, { traceparent: 'garbage' }),
    );
    const { rows } = await db.pool.query<{ headers: Record<string, string> }>(
      'SELECT headers FROM outbox WHERE aggregate_id = $1',
      [`note:${result.result.noteId}`],
    );
    const parents = rows.map((r) => r.headers.traceparent!);
    expect(parents).toHaveLength(2);
    expect(parents[0]).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(parents[1]).toBe(parents[0]);
    const { rows: notes } = await db.pool.query('SELECT trace_id FROM notes WHERE body = $1', [
      'untraced',
    ]);
    expect(parents[0]).toContain(notes[0].trace_id);
  });
});

/** Polls a condition (no time bound of its own: the test timeout is the bound). */
async function waitUntil(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 10));
}

describe('pgPoolTransactions options', () => {
  it('preparedStatements: false reaches the executor: the outbox INSERT is not prepared on the connection', async () => {
    const { createOutbox } = await import('../../../src/index.js');
    const outbox = createOutbox();
    const pg = await import('pg');
    const prepared = async (preparedStatements: boolean) => {
      // One connection, so the prepared statements we look for are on the one we query.
      const pool = new pg.default.Pool({ connectionString: db.url, max: 1 });
      try {
        return await pgPoolTransactions(pool, { preparedStatements }).run(async (tx, client) => {
          await outbox.enqueue(tx, { topic: 'mail.send', aggregateId: 'runner:1', payload: {} });
          const { rows } = await client.query(
            `SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'agent_outbox_%'`,
          );
          return (rows[0] as { n: number }).n;
        });
      } finally {
        await pool.end();
      }
    };
    expect(await prepared(false)).toBe(0);
    expect(await prepared(true)).toBe(1);
  });
});
