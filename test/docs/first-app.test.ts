import { execFile } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { fromPg, readDatabaseEngine, readEffectStatus } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { packagePaths, root, typeScriptBlocks } from './code-blocks.js';

/**
 * The README's first app (the ```ts first-app block) runs as a user runs it: its text unchanged
 * except that `agent-outbox` imports point at this checkout's sources, in a child process
 * (`node --import tsx`) against a fresh database, serving its HTTP consumer on a free port. The
 * order, its message (performed, on the lanes engine a new schema records), the receipt (the
 * effect) and the ledger row must all be there.
 */

const directory = join(root, '.tmp', 'first-app');
let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase({ migrated: false });
});
afterAll(async () => {
  rmSync(directory, { recursive: true, force: true });
  await db?.drop();
});

test("the README's first app runs: order, message dispatched, receipt once, ledger row", async () => {
  const [block] = typeScriptBlocks('README.md').filter((b) => b.name === 'first-app');
  expect(block).toBeDefined();
  const paths = packagePaths();
  const code = block!.code.replace(
    /from '(agent-outbox(?:\/[\w/-]+)?)'/g,
    (whole, name: string) => {
      const target = paths[name]?.[0];
      expect(target, `README imports ${name}, which the exports map does not have`).toBeDefined();
      return `from '${target}'`;
    },
  );
  expect(code).not.toMatch(/'agent-outbox/);
  mkdirSync(directory, { recursive: true });
  const file = join(directory, 'app.ts');
  writeFileSync(file, code);

  const stdout = await new Promise<string>((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', file],
      { cwd: root, env: { ...process.env, DATABASE_URL: db.url, PORT: '0' }, timeout: 60_000 },
      (error, out, err) =>
        error
          ? reject(new Error(`the first app failed: ${error.message}\n${out}${err}`))
          : resolve(out),
    );
  });
  expect(stdout).toMatch(/receipt recorded: \{ order_id: 1, email: 'ada@example\.com' \}/);

  // A new schema runs on the lanes engine (migration 036 records it): the message is there.
  expect(await readDatabaseEngine(fromPg(db.pool))).toBe('lanes');
  const { rows } = await db.pool.query<{
    orders: number;
    messageId: string;
    receipts: number;
    ledger: number;
  }>(
    `SELECT (SELECT count(*)::int FROM orders) AS orders,
            (SELECT message_id::text FROM outbox_lane_messages
              WHERE topic = 'receipt.send' AND aggregate_id = 'order:1') AS "messageId",
            (SELECT count(*)::int FROM receipts WHERE order_id = 1) AS receipts,
            (SELECT count(*)::int FROM processed_messages p JOIN outbox_lane_messages o
                 ON o.message_id::text = p.message_id
              WHERE p.consumer = 'receipts' AND p.state = 'done') AS ledger`,
  );
  const { messageId, ...counts } = rows[0]!;
  expect(counts).toEqual({ orders: 1, receipts: 1, ledger: 1 });
  const { effects } = await readEffectStatus(fromPg(db.pool), {
    messageIds: [messageId],
    consumers: ['receipts'],
  });
  expect(effects[0]?.state).toBe('performed');
}, 120_000);
