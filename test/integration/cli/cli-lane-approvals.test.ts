import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { runCli } from '../../helpers/run-cli.js';

/**
 * `outbox approvals|approve|reject --engine lanes` in their own processes, on held messages of
 * the lanes engine (migration 027); a lane dispatcher publishes what they approve, in order.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

const cli = (...args: string[]) => runCli([...args, '--database-url', db.url]);
const lanes = ['--engine', 'lanes'];

describe('outbox approve / reject --engine lanes', () => {
  it('lists, approves and rejects held lane messages; refuses twice and unknown ids', async () => {
    const written = await enqueueLanes(db.pool, [
      { topic: 'payment.refund', aggregateId: 'c-1', payload: { n: 1 }, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'c-1', payload: { n: 2 } },
      { topic: 'payment.refund', aggregateId: 'c-2', payload: { n: 1 }, requiresApproval: true },
      { topic: 'payment.refund', aggregateId: 'c-2', payload: { n: 2 } },
    ]);
    const [a, , b] = written;

    const listed = await cli('approvals', ...lanes, '--json');
    expect(listed.code).toBe(0);
    expect(
      (JSON.parse(listed.stdout) as { messageId: string }[]).map((m) => m.messageId).sort(),
    ).toEqual([a!.messageId, b!.messageId].sort());
    // The claim engine knows nothing of them.
    expect((await cli('approve', a!.id, '--by', 'ops')).code).toBe(1);
    expect((await cli('approve', a!.id, '--by', 'ops', '--engine', 'queues')).code).toBe(2);

    const approved = await cli('approve', a!.id, ...lanes, '--by', 'ops-alice', '--note', 'ok');
    expect(approved.stderr).toBe('');
    expect(approved.code).toBe(0);
    expect(approved.stdout).toContain(`approved #${a!.id} ${a!.messageId}`);
    const again = await cli('approve', a!.messageId, ...lanes, '--by', 'ops-bob');
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already approved by ops-alice/);
    const unknown = await cli('reject', '424242', ...lanes, '--by', 'x', '--reason', 'y');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/424242: no such message/);

    const rejected = await cli(
      'reject',
      b!.messageId,
      ...lanes,
      '--by',
      'ops-carol',
      '--reason',
      'duplicate',
      '--dead-letter-policy',
      'skip',
    );
    expect(rejected.code).toBe(0);
    const { rows } = await db.pool.query<{ id: string; state: string; decided_by: string }>(
      `SELECT id::text, state, decided_by FROM outbox_lane_approvals ORDER BY id`,
    );
    expect(rows).toEqual([
      { id: a!.id, state: 'approved', decided_by: 'ops-alice' },
      { id: b!.id, state: 'rejected', decided_by: 'ops-carol' },
    ]);
    expect((await cli('approvals', ...lanes)).stdout).toContain('nothing waits for approval');

    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 20,
      deadLetterPolicy: 'skip',
    });
    dispatcher.start();
    try {
      const until = Date.now() + 10_000;
      while (publisher.published.length < 3 && Date.now() < until)
        await new Promise((resolve) => setTimeout(resolve, 20));
      await new Promise((resolve) => setTimeout(resolve, 200));
    } finally {
      await dispatcher.stop();
    }
    expect(publisher.published.map((m) => `${m.aggregateId}/${m.sequence}`).sort()).toEqual([
      'c-1/1',
      'c-1/2',
      'c-2/2',
    ]);
    expect(
      publisher.published.filter((m) => m.aggregateId === 'c-1').map((m) => m.sequence),
    ).toEqual([1, 2]);
  });
});
