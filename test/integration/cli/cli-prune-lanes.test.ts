import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { runCli } from '../../helpers/run-cli.js';

/** `outbox prune` on the lanes engine's messages, as an operator types it (migration 033). */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

const count = async (sql: string) => Number((await db.pool.query<{ n: string }>(sql)).rows[0]!.n);

describe('outbox prune: lanes engine', () => {
  it('--archive moves consumed lane messages to outbox_lane_archive; without it they are deleted', async () => {
    await enqueueLanes(
      db.pool,
      Array.from({ length: 6 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `order:${i % 2}`,
        payload: { i },
      })),
    );
    await createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher(),
    }).drain();
    await db.pool.query(
      `UPDATE outbox_lane_messages SET created_at = now() - interval '2 hours'
       WHERE payload->>'i' IN ('0', '1', '2', '3')`,
    );
    const base = ['prune', '--database-url', db.url, '--older-than', '1h'];

    const dry = await runCli([...base, '--archive', '--dry-run']);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toContain('would archive 4');

    const archived = await runCli([...base, '--archive']);
    expect(archived.code, archived.stderr).toBe(0);
    expect(archived.stdout + archived.stderr).toMatch(/outbox: 4 rows archived/);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(4);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(2);

    await db.pool.query(`UPDATE outbox_lane_messages SET created_at = now() - interval '2 hours'`);
    const deleted = await runCli(base);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(deleted.stdout + deleted.stderr).toMatch(/outbox: 2 rows deleted/);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_messages')).toBe(0);
    expect(await count('SELECT count(*) AS n FROM outbox_lane_archive')).toBe(4);
  });
});
