import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher } from '../../../src/dispatcher/dispatcher.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';

/**
 * Moving from the claim engine to the lanes engine (docs/lanes.md): the engines share each
 * aggregate's sequence counter, and a lanes message must not be published before a claim-engine
 * message of its aggregate that comes before it and is not published yet. The lane dispatcher
 * defers such a message (parked, unattempted) and publishes it once the claim engine has.
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db?.drop());

const claims = createOutbox();
const lanes = createOutbox({ engine: 'lanes' });
const write = (outbox: typeof claims, messages: { aggregateId: string; n: number }[]) =>
  inTransaction(db.pool, (client) =>
    outbox.enqueue(
      fromPg(client),
      messages.map(({ aggregateId, n }) => ({ topic: 'mail.send', aggregateId, payload: { n } })),
    ),
  );

describe('lanes engine beside the claim engine during a switch', () => {
  it('publishes no lanes message ahead of an earlier claim-engine message of its aggregate', async () => {
    await write(claims, [
      { aggregateId: 'x', n: 1 },
      { aggregateId: 'x', n: 2 },
    ]);
    await write(lanes, [
      { aggregateId: 'x', n: 3 },
      { aggregateId: 'y', n: 1 },
    ]);
    // Written on lanes first, then on the claim engine: the lanes one comes first and goes.
    await write(lanes, [{ aggregateId: 'z', n: 1 }]);
    await write(claims, [{ aggregateId: 'z', n: 2 }]);

    const publisher = new InMemoryPublisher();
    const laneDrain = () => createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
    const first = await laneDrain();
    expect(first).toMatchObject({ published: 2, postponed: 1 });
    expect(publisher.published.map((m) => `${m.aggregateId}:${m.sequence}`).sort()).toEqual([
      'y:1',
      'z:1',
    ]);
    const parked = await db.pool.query<{ attempts: number; last_error: string }>(
      `SELECT attempts, last_error FROM outbox_lane_parked`,
    );
    expect(parked.rows).toEqual([
      { attempts: 0, last_error: expect.stringMatching(/claim engine's earlier messages/) },
    ]);

    // The claim engine publishes x:1, x:2 (and z:2); then x:3 goes on lanes.
    expect(await createDispatcher({ executor: fromPg(db.pool), publisher }).drain()).toMatchObject({
      published: 3,
    });
    await db.pool.query(`UPDATE outbox_lane_parked SET available_at = now()`);
    expect(await laneDrain()).toMatchObject({ published: 1 });
    expect(publisher.published.filter((m) => m.aggregateId === 'x').map((m) => m.sequence)).toEqual(
      [1, 2, 3],
    );
  });

  it('does not wait for a claim-engine dead letter', async () => {
    await write(claims, [{ aggregateId: 'd', n: 1 }]);
    await db.pool.query(
      `UPDATE outbox SET dead_lettered_at = now(), last_error = 'gone' WHERE aggregate_id = 'd'`,
    );
    await write(lanes, [{ aggregateId: 'd', n: 2 }]);
    const publisher = new InMemoryPublisher();
    expect(
      await createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain(),
    ).toMatchObject({ published: 1, postponed: 0 });
    expect(publisher.published.map((m) => m.sequence)).toEqual([2]);
  });
});
