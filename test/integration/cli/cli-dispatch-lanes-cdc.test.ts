import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseLsn } from '../../../src/cdc/lsn.js';
import { dropSlots, slotState } from '../../fixtures/latency/cdc-helpers.js';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import type { TestDatabase } from '../../helpers/database.js';
import { enqueueLanes, lanesPending } from '../../helpers/lanes.js';
import { createLogicalTestDatabase } from '../../helpers/logical-database.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * `outbox dispatch --engine lanes --mode cdc` as a separate process: the lanes dispatcher woken
 * from the WAL (src/cdc/lane-cdc-wake-source.ts), killed -9 and started again on its slot.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
const running: CliProcess[] = [];
beforeAll(async () => {
  db = await createLogicalTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  for (const cli of running)
    if (cli.child.exitCode === null) {
      cli.child.kill('SIGKILL');
      await cli.exited;
    }
  await receiver?.close();
  try {
    if (db) await dropSlots(db.pool, db.name);
  } finally {
    await db?.drop();
  }
});

const SLOT = 'ao_cli_lanes_cdc';

function dispatch(): CliProcess {
  // A poll of a minute: within the test's timeouts only the WAL can wake it.
  const cli = startCli([
    'dispatch',
    '--engine',
    'lanes',
    '--mode',
    'cdc',
    '--slot',
    SLOT,
    '--poll-interval-ms',
    '60000',
    // A killed process's lanes wait this long for another: kept short for the test.
    '--lease-ms',
    '3000',
    '--database-url',
    db.url,
    '--publisher',
    receiver.url,
  ]);
  running.push(cli);
  return cli;
}

async function streaming(cli: CliProcess): Promise<void> {
  await expect
    .poll(() => cli.output(), { timeout: 20_000, interval: 100 })
    .toMatch(/CDC streaming/);
}

const mails = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}-${i % 3}`,
    payload: { i },
  }));

describe('outbox dispatch --engine lanes --mode cdc', () => {
  it('publishes each commit woken by the WAL; after kill -9 a new process catches up from its slot, at the end of WAL', async () => {
    const first = dispatch();
    await streaming(first);
    await enqueueLanes(db.pool, mails('a', 6));
    await expect.poll(() => receiver.distinct(), { timeout: 15_000 }).toBe(6);
    // Producers never notified: no dispatcher ever registered as a LISTEN waiter.
    expect((await db.pool.query('SELECT 1 FROM outbox_waiters')).rowCount).toBe(0);
    // An idle dispatcher writes its cursors with the lane read that follows its publishes, up
    // to HINTED_CATCH_UP_MS (100 ms) later (lane-dispatcher.ts); killed before that, the next
    // owner publishes them again, same ids (at least once, G2). Killed after it here, so that
    // "nothing twice" below is about catching up from the slot.
    await expect.poll(() => lanesPending(db.pool), { timeout: 5_000, interval: 10 }).toBe(0);

    first.child.kill('SIGKILL');
    await first.exited;
    // Written while no process runs: the slot falls behind; the lanes keep the messages.
    await enqueueLanes(db.pool, mails('b', 9));
    const { rows } = await db.pool.query<{ lsn: string }>(
      'SELECT pg_current_wal_lsn()::text AS lsn',
    );
    const written = parseLsn(rows[0]!.lsn);
    expect(parseLsn((await slotState(db.pool, SLOT))!.confirmed)).toBeLessThan(written);

    // The killed process holds its lanes until their leases (--lease-ms 3000) run out; a new
    // process started after that takes them all at once, and its start's catch-up read (its
    // poll is a minute) finds what was written meanwhile.
    await expect
      .poll(
        async () =>
          (
            await db.pool.query(
              `SELECT 1 FROM outbox_lanes WHERE lease_expires_at > now()
               UNION ALL SELECT 1 FROM outbox_lane_owners WHERE seen_until > now()`,
            )
          ).rowCount,
        { timeout: 20_000, interval: 250 },
      )
      .toBe(0);
    const second = dispatch();
    await streaming(second);
    // Its slot moved to the end of WAL before streaming: nothing written while stopped replayed.
    expect(parseLsn((await slotState(db.pool, SLOT))!.confirmed)).toBeGreaterThanOrEqual(written);
    await expect.poll(() => receiver.distinct(), { timeout: 15_000 }).toBe(15);
    await enqueueLanes(db.pool, mails('c', 3));
    await expect.poll(() => receiver.distinct(), { timeout: 15_000 }).toBe(18);
    // Each aggregate in order, nothing twice.
    const seen = receiver.envelopes.map((e) => `${e.aggregateId}#${e.sequence}`);
    expect(new Set(seen).size).toBe(seen.length);
    for (const prefix of ['a', 'b', 'c'])
      for (let k = 0; k < 3; k++) {
        const sequences = receiver.envelopes
          .filter((e) => e.aggregateId === `${prefix}-${k}`)
          .map((e) => e.sequence);
        expect(sequences).toEqual([...sequences].sort((x, y) => x - y));
      }
    second.child.kill('SIGTERM');
    expect(await second.exited, second.output()).toBe(0);
  }, 90_000);
});
