import { performance } from 'node:perf_hooks';
import { afterEach, describe, expect, it } from 'vitest';
import { fromPg, migrate } from '../../src/index.js';
import { createPgClient, createPgPool } from '../../src/store/multi-host-pool.js';
import {
  requireAutoFailover,
  startAutoFailover,
  type AutoFailoverCluster,
} from '../helpers/auto-failover.js';
import { dispatchArgs, startCli } from '../helpers/cli-process.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { startFailoverWriter } from '../helpers/failover-writer.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * Postgres fails over by itself (issue 44): a pg_auto_failover formation (a monitor and two
 * nodes on this machine), no proxy. `outbox dispatch` and a writer are given the formation's
 * multi-host URL (`postgres://h:p1,h:p2/app?target_session_attrs=read-write`), and
 * `pg_autoctl perform failover` runs in the middle: the primary is drained and demoted, the
 * secondary promoted. Both must find the new primary by themselves.
 */
const available = requireAutoFailover();
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => undefined);
});

describe.runIf(available)('pg_auto_failover: a failover under a running dispatcher', () => {
  it('0 committed messages lost, 0 effects without their row, order held; the time to resume is printed', async () => {
    const formingStarted = performance.now();
    const cluster: AutoFailoverCluster = await startAutoFailover();
    cleanups.push(() => cluster.stop());
    console.log(`[auto-failover] formation formed in ${(cluster.formedInMs / 1000).toFixed(1)} s`);
    const setup = createPgClient(cluster.url);
    await setup.connect();
    await migrate(fromPg(setup), { engine: 'claims' });
    await setup.end();

    const receiver = await startWebhookReceiver();
    cleanups.push(() => receiver.close());
    const dispatcher = startCli(
      dispatchArgs(
        cluster.url,
        receiver.url,
        '--lease-ms',
        '5000',
        '--batch-size',
        '50',
        '--statement-timeout-ms',
        '3000',
        '--connect-timeout-ms',
        '2000',
      ),
    );
    cleanups.push(async () => {
      dispatcher.child.kill('SIGKILL');
      await dispatcher.exited;
    });

    // A writer on the same URL.
    const pool = createPgPool(cluster.url, { max: 2, connectionTimeoutMillis: 2_000 });
    cleanups.push(() => pool.end());
    const writer = startFailoverWriter(pool);
    const { acknowledged, inDoubt } = writer;

    await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBeGreaterThan(100);
    const oldPrimary = await cluster.primaryPort();
    const failoverAt = performance.now();
    await cluster.failover();
    const newPrimary = await cluster.primaryPort();
    expect(newPrimary).not.toBe(oldPrimary);
    const before = writer.transactions();
    await expect
      .poll(() => writer.transactions(), { timeout: 60_000 })
      .toBeGreaterThan(before + 10);
    await writer.stop();

    const fresh = createPgClient(cluster.url);
    await fresh.connect();
    cleanups.push(() => fresh.end());
    await expect
      .poll(
        async () =>
          (await fresh.query(`SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL`))
            .rows[0].n,
        { timeout: 60_000 },
      )
      .toBe(0);
    const { rows } = await fresh.query<{ message_id: string; attempts: number }>(
      `SELECT message_id::text, attempts FROM outbox_messages`,
    );

    const onNewPrimary = new Set(rows.map((r) => r.message_id));
    const delivered = new Set(receiver.events.map((e) => e.messageId));
    const expected = [...acknowledged, ...inDoubt.filter((m) => onNewPrimary.has(m.messageId))];
    const report = checkHistory(expectedOf(expected), receiver.events);
    // Dispatch resumed: the first delivery of a message the new primary committed.
    const writtenAfter = new Set(
      acknowledged.filter((m) => m.port === newPrimary).map((m) => m.messageId),
    );
    const firstAfter = Math.min(
      ...receiver.events.filter((e) => writtenAfter.has(e.messageId)).map((e) => e.start),
    );
    const figures = {
      acknowledged: acknowledged.length,
      inDoubt: inDoubt.length,
      acknowledgedMissingOnNewPrimary: acknowledged.filter((m) => !onNewPrimary.has(m.messageId))
        .length,
      effectsWithoutRow: [...delivered].filter((id) => !onNewPrimary.has(id)).length,
      lost: report.lost.length,
      orderViolations: report.orderViolations.length,
      duplicates: report.duplicates,
      duplicateBound: rows.reduce((sum, r) => sum + r.attempts - 1, 0),
      resumeSeconds: Number(((firstAfter - failoverAt) / 1000).toFixed(1)),
      formedSeconds: Number((cluster.formedInMs / 1000).toFixed(1)),
      totalSeconds: Number(((performance.now() - formingStarted) / 1000).toFixed(1)),
    };
    console.log(`[auto-failover] ${JSON.stringify(figures)}`);
    // What the operator saw in the dispatcher's log meanwhile.
    const said = dispatcher
      .output()
      .split('\n')
      .filter((line) => /warn|error/i.test(line));
    console.log(
      `[auto-failover] dispatcher log, ${said.length} warnings/errors:\n${said.slice(0, 8).join('\n')}`,
    );
    expect(figures.acknowledgedMissingOnNewPrimary).toBe(0);
    expect(figures.effectsWithoutRow).toBe(0);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(figures.duplicates).toBeLessThanOrEqual(figures.duplicateBound);
    expect(writtenAfter.size).toBeGreaterThan(0);
    // The dispatcher went on by itself: it is the same process, and said what happened.
    expect(dispatcher.child.exitCode).toBeNull();
  }, 300_000);
});
