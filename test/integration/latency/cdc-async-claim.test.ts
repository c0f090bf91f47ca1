import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCdcDispatcher, type CdcDispatcher } from '../../../src/cdc/index.js';
import { fromPg, InMemoryPublisher } from '../../../src/index.js';
import type { TestDatabase } from '../../helpers/database.js';
import { createLogicalTestDatabase } from '../../helpers/logical-database.js';
import { enqueueCommitted, manyMessages } from '../../helpers/outbox-fixtures.js';
import { dropSlots } from '../../fixtures/latency/cdc-helpers.js';

/**
 * `asyncClaim` on the CDC dispatcher (issue 43, `latency_ms.cdc`): the stream's claims and the
 * sweeper's skip the WAL flush wait, with the polling dispatcher's crash-recovery guard
 * (sql/commit-mode.ts): for `leaseMs` after Postgres's statistics were reset — what a crash
 * recovery does — no claim takes anything. `pg_stat_reset_shared('bgwriter')` resets the same
 * time without a crash, so the guard shows without killing anything; it is server-wide, hence a
 * private server (the shared one's other tests would pause too).
 */
let db: TestDatabase;
let dispatcher: CdcDispatcher | undefined;
beforeAll(async () => {
  db = await createLogicalTestDatabase({ privateServer: true });
}, 120_000);
afterAll(async () => {
  await dispatcher?.stop();
  await dropSlots(db.pool, db.name);
  await db.drop();
});

describe('the CDC dispatcher with asyncClaim', () => {
  it('publishes from the stream with asynchronous claims, and takes nothing for leaseMs after a statistics reset', async () => {
    const publisher = new InMemoryPublisher();
    const claims: { owner: string; count: number }[] = [];
    dispatcher = createCdcDispatcher({
      executor: fromPg(db.pool),
      replicationConnection: { connectionString: db.url },
      slotName: `ao_cdc_async_${db.name.slice(-8)}`,
      publisher,
      asyncClaim: true,
      asyncSettle: true,
      leaseMs: 4_000,
      sweepIntervalMs: 600_000,
      confirmIntervalMs: 100,
    });
    dispatcher.on('dispatcher:claim:success', ({ owner, count }) => claims.push({ owner, count }));
    // Long enough ago that the guard is open: a fresh embedded cluster's reset time is its start.
    await expect
      .poll(
        async () =>
          (
            await db.pool.query<{ open: boolean }>(
              `SELECT pg_stat_get_bgwriter_stat_reset_time() <= now() - interval '4 seconds' AS open`,
            )
          ).rows[0]!.open,
        { timeout: 30_000, interval: 250 },
      )
      .toBe(true);
    await dispatcher.start();

    const first = await enqueueCommitted(db.pool, manyMessages(2, 2));
    await expect.poll(() => publisher.published.length, { timeout: 30_000 }).toBe(first.length);
    // Synchronous claims would have committed with the server's default: the claims ran as the
    // statement says (the guard is the same clause; see dispatcher-async-claim-crash.test.ts).
    expect(claims.some((c) => c.owner.startsWith('cdc') && c.count > 0)).toBe(true);

    // The reset a crash recovery does: the guard holds every claim back for leaseMs.
    await db.pool.query(`SELECT pg_stat_reset_shared('bgwriter')`);
    const resetAt = Date.now();
    const second = await enqueueCommitted(db.pool, manyMessages(2, 2, 'mail.send'));
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    // Not a timing claim: "nothing before 2 s" can only be made more true by a slow machine.
    expect(publisher.published.length).toBe(first.length);
    await expect
      .poll(() => publisher.published.length, { timeout: 60_000 })
      .toBe(first.length + second.length);
    expect(Date.now() - resetAt).toBeGreaterThanOrEqual(4_000);
    expect(new Set(publisher.published.map((m) => m.id)).size).toBe(first.length + second.length);
  }, 150_000);
});
