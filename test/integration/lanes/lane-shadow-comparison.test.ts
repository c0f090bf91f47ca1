import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readShadowComparison } from '../../../src/admin/status.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { runCli } from '../../helpers/run-cli.js';

/**
 * Retrofit shadow mode on the lanes engine: `readShadowComparison({ engine: 'lanes' })` and
 * `outbox status --engine lanes --shadow` count shadow and live messages per topic, and which of
 * them the engine published (a parked failure is not; one written after the drain is not).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

describe('lanes engine: shadow comparison', () => {
  it('counts shadow and live messages per topic, published or not', async () => {
    await enqueueLanes(db.pool, [
      { topic: 'mail.send', aggregateId: 's1', payload: 1, shadow: true },
      { topic: 'mail.send', aggregateId: 's1', payload: 2, shadow: true },
      { topic: 'mail.send', aggregateId: 'l1', payload: 3 },
      { topic: 'mail.send', aggregateId: 'fails', payload: 4 },
      { topic: 'payment.charge', aggregateId: 'p1', payload: 5 },
    ]);
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.aggregateId === 'fails' ? { status: 'retryable', error: 'down' } : undefined,
    });
    const executor = fromPg(db.pool);
    await createLaneDispatcher({
      executor,
      publisher,
      backoff: { baseMs: 3_600_000, maxMs: 3_600_000, jitterMs: 0 },
    }).drain();
    expect(publisher.published.map((m) => m.aggregateId).sort()).toEqual(['l1', 'p1']);
    // Written after the drain: not published yet.
    await enqueueLanes(db.pool, [
      { topic: 'payment.charge', aggregateId: 'p2', payload: 6, shadow: true },
    ]);

    const expected = [
      { topic: 'mail.send', shadow: 2, live: 2, shadowDispatched: 2, liveDispatched: 1 },
      { topic: 'payment.charge', shadow: 1, live: 1, shadowDispatched: 0, liveDispatched: 1 },
    ];
    expect(await readShadowComparison(executor, { engine: 'lanes' })).toEqual(expected);
    // The claim engine's table holds none of them.
    expect(await readShadowComparison(executor)).toEqual([]);
    // Outside the window: nothing.
    await db.pool.query(`UPDATE outbox_lane_messages SET created_at = now() - interval '2 days'`);
    expect(await readShadowComparison(executor, { engine: 'lanes' })).toEqual([]);
    await db.pool.query(`UPDATE outbox_lane_messages SET created_at = now()`);

    const cli = await runCli([
      'status',
      '--engine',
      'lanes',
      '--shadow',
      '--since',
      '1h',
      '--json',
      '--database-url',
      db.url,
    ]);
    expect(cli.code, cli.stderr).toBe(0);
    expect((JSON.parse(cli.stdout) as { shadow: unknown }).shadow).toEqual(expected);

    await expect(readShadowComparison(executor, { engine: 'queues' as never })).rejects.toThrow(
      /'claims' or 'lanes'/,
    );
  });
});
