import { PGlite } from '@electric-sql/pglite';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectInMemory,
  createToolServer,
  pgliteTransactions,
  type InMemoryToolClient,
} from '../../../src/agent/index.js';
import { fromPglite, migrate } from '../../../src/index.js';
import { NOTES_TABLE_SQL, notesTool, resultJson } from './notes-tool.js';

let db: PGlite;
let mcp: InMemoryToolClient;

beforeAll(async () => {
  db = await PGlite.create();
  await migrate(fromPglite(db), { engine: 'claims' });
  await db.query(NOTES_TABLE_SQL);
  mcp = await connectInMemory(
    createToolServer({ name: 'notes', tools: [notesTool(pgliteTransactions(db))] }),
  );
});
afterAll(async () => {
  await mcp?.close();
  await db?.close();
});

const count = async (sql: string) => (await db.query<{ n: number }>(sql)).rows[0]!.n;
const call = (args: Record<string, unknown>) =>
  mcp.client.callTool({ name: 'add_note', arguments: args });

describe('outboxTool on PGlite, through a real MCP client', () => {
  it('commits, dedupes a repeated key, and rolls back a throw', async () => {
    const ok = resultJson(await call({ body: 'a', idempotency_key: 'k1' }));
    expect(ok).toMatchObject({ ok: true, deduped: false });
    expect(await count('SELECT count(*)::int AS n FROM outbox')).toBe(2);

    const dup = await call({ body: 'a', idempotency_key: 'k1' });
    expect(resultJson(dup)).toMatchObject({ ok: true, deduped: true });

    const failed = await call({ body: 'b', fail_midway: true, idempotency_key: 'k2' });
    expect(failed.isError).toBe(true);
    expect(await count('SELECT count(*)::int AS n FROM outbox')).toBe(2);
    expect(await count("SELECT count(*)::int AS n FROM notes WHERE body = 'b'")).toBe(0);
  });

  it('concurrent calls with one key run one after another: exactly one note', async () => {
    const results = await Promise.all(
      [1, 2, 3].map(() => call({ body: 'same', idempotency_key: 'k-concurrent' })),
    );
    expect(results.map((r) => resultJson(r).deduped).sort()).toEqual([false, true, true]);
    expect(await count("SELECT count(*)::int AS n FROM notes WHERE body = 'same'")).toBe(1);
  });
});
