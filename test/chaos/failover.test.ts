import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { fromPg, migrate, type EnqueuedMessage } from '../../src/index.js';
import { startCli, type CliProcess } from '../helpers/cli-process.js';
import { startFreezeProxy, type FreezeProxy } from '../helpers/freeze-proxy.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { startFailoverWriter } from '../helpers/failover-writer.js';
import {
  startReplicatedPostgres,
  type ReplicatedPostgres,
} from '../helpers/replicated-postgres.js';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * Failover behind an endpoint: a primary and a streaming replica (two local PostgreSQL 15
 * clusters, pg_basebackup), writers and `outbox dispatch` through a proxy that plays the
 * endpoint. Mid-run the primary stops (immediate), the replica is promoted, the proxy sends new
 * connections to it.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => undefined);
});

interface Outcome {
  acknowledged: EnqueuedMessage[];
  /** COMMIT sent, no answer: committed or not, the new primary tells. */
  inDoubt: EnqueuedMessage[];
  receiver: WebhookReceiver;
  /** The new primary's outbox after the run. */
  rows: { message_id: string; attempts: number; dispatched: boolean }[];
  dispatcher: CliProcess;
}

/**
 * `lagBeforeCrashMs`: the replication link freezes this long before the primary stops, while
 * writers and the dispatcher go on: what the primary acknowledged and published meanwhile never
 * reaches the replica (asynchronous replication only: a synchronous primary waits instead).
 */
async function failoverRun(
  synchronous: boolean,
  lagBeforeCrashMs = 0,
  mode: 'poll' | 'cdc' = 'poll',
): Promise<Outcome> {
  let link: FreezeProxy | undefined;
  const cluster: ReplicatedPostgres = await startReplicatedPostgres({
    synchronous,
    logical: mode === 'cdc',
    replicationVia: async (primaryPort) => {
      link = await startFreezeProxy(primaryPort);
      return link.port;
    },
  });
  cleanups.push(() => cluster.stop());
  cleanups.push(async () => link?.close());
  const admin = new pg.Client({ connectionString: cluster.url(cluster.primaryPort) });
  await admin.connect();
  await admin.query('CREATE DATABASE outbox');
  await admin.end();
  const direct = new pg.Client({ connectionString: cluster.url(cluster.primaryPort, 'outbox') });
  await direct.connect();
  await migrate(fromPg(direct), { engine: 'claims' });
  await direct.end();

  const proxy: FreezeProxy = await startFreezeProxy(cluster.primaryPort);
  cleanups.push(() => proxy.close());
  const receiver = await startWebhookReceiver();
  cleanups.push(() => receiver.close());
  const endpoint = proxy.url(cluster.url(cluster.primaryPort, 'outbox'));
  const dispatcher = startCli([
    'dispatch',
    '--database-url',
    endpoint,
    '--publisher',
    receiver.url,
    '--lease-ms',
    '5000',
    '--batch-size',
    '50',
    '--statement-timeout-ms',
    '3000',
    '--connect-timeout-ms',
    '2000',
    ...(mode === 'cdc' ? ['--mode', 'cdc'] : []),
  ]);
  cleanups.push(async () => {
    dispatcher.child.kill('SIGKILL');
    await dispatcher.exited;
  });

  // A writer through the endpoint.
  const pool = new pg.Pool({ connectionString: endpoint, max: 2, connectionTimeoutMillis: 2_000 });
  cleanups.push(() => pool.end());
  const writer = startFailoverWriter(pool);

  await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBeGreaterThan(100);
  if (lagBeforeCrashMs > 0) {
    link!.freeze();
    await new Promise((resolve) => setTimeout(resolve, lagBeforeCrashMs));
  }
  await cluster.crashPrimary();
  await cluster.promoteReplica();
  proxy.retarget(cluster.replicaPort);
  const before = writer.transactions();
  await expect.poll(() => writer.transactions(), { timeout: 60_000 }).toBeGreaterThan(before + 10);
  await writer.stop();

  const fresh = new pg.Client({ connectionString: cluster.url(cluster.replicaPort, 'outbox') });
  await fresh.connect();
  cleanups.push(() => fresh.end());
  // Everything the new primary holds gets published.
  await expect
    .poll(
      async () =>
        (await fresh.query(`SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL`))
          .rows[0].n,
      { timeout: 60_000 },
    )
    .toBe(0);
  const { rows } = await fresh.query<Outcome['rows'][number]>(
    `SELECT message_id::text, attempts, dispatched_at IS NOT NULL AS dispatched FROM outbox_messages`,
  );
  return { acknowledged: writer.acknowledged, inDoubt: writer.inDoubt, receiver, rows, dispatcher };
}

function summarize(name: string, outcome: Outcome) {
  const onNewPrimary = new Set(outcome.rows.map((r) => r.message_id));
  const delivered = new Set(outcome.receiver.events.map((e) => e.messageId));
  const expected = [
    ...outcome.acknowledged,
    ...outcome.inDoubt.filter((m) => onNewPrimary.has(m.messageId)),
  ];
  const report = checkHistory(
    expectedOf(expected),
    outcome.receiver.events.filter((e) => onNewPrimary.has(e.messageId)),
  );
  const figures = {
    acknowledged: outcome.acknowledged.length,
    inDoubt: outcome.inDoubt.length,
    inDoubtCommitted: outcome.inDoubt.filter((m) => onNewPrimary.has(m.messageId)).length,
    acknowledgedMissingOnNewPrimary: outcome.acknowledged.filter(
      (m) => !onNewPrimary.has(m.messageId),
    ).length,
    publishedWithoutRowOnNewPrimary: [...delivered].filter((id) => !onNewPrimary.has(id)).length,
    lostAmongRowsOnNewPrimary: report.lost.filter((id) => onNewPrimary.has(id)).length,
    orderViolations: report.orderViolations.length,
    duplicates: report.duplicates,
    duplicateBound: outcome.rows.reduce((sum, r) => sum + r.attempts - 1, 0),
  };
  console.log(`[failover ${name}] ${JSON.stringify(figures)}`);
  return { figures, report };
}

describe('failover behind an endpoint (primary stopped immediately, replica promoted)', () => {
  it('synchronous replication: nothing acknowledged is lost, order kept, duplicates bounded', async () => {
    const outcome = await failoverRun(true);
    const { figures, report } = summarize('sync', outcome);
    expect(figures.acknowledgedMissingOnNewPrimary).toBe(0);
    expect(figures.publishedWithoutRowOnNewPrimary).toBe(0);
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(figures.duplicates).toBeLessThanOrEqual(figures.duplicateBound);
  }, 240_000);

  // PostgreSQL 15/16 copy no logical slot to a standby: the new primary has none. The CDC
  // dispatcher finds it gone when its stream reopens through the endpoint, creates it there, and
  // its sweeper publishes at once what the new slot never streams (docs/failure-handling.md).
  it('CDC, synchronous replication: the slot is gone after the failover, recreated on the new primary; the sweeper covers the gap, nothing lost', async () => {
    const outcome = await failoverRun(true, 0, 'cdc');
    const { figures, report } = summarize('cdc-sync', outcome);
    expect(figures.acknowledgedMissingOnNewPrimary).toBe(0);
    expect(figures.publishedWithoutRowOnNewPrimary).toBe(0);
    expect(report.lost).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(figures.duplicates).toBeLessThanOrEqual(figures.duplicateBound);
    const output = outcome.dispatcher.output();
    expect(output).toMatch(/replication slot .* was gone .*recreated/);
    expect(output.match(/replication slot created/g)).toHaveLength(2);
    expect(output).toMatch(/CDC streaming.*reconnect=true/);
    console.log(`[failover cdc-sync] ${/.*was gone.*/.exec(output)![0]}`);
  }, 240_000);

  it('asynchronous replication: whatever the new primary holds is published once in order; what it lost is measured', async () => {
    const outcome = await failoverRun(false);
    const { figures, report } = summarize('async', outcome);
    expect(figures.lostAmongRowsOnNewPrimary).toBe(0);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
  }, 240_000);

  it('asynchronous replication with the replica 1 s behind: acknowledged commits are lost (and messages may be published whose rows the new primary never had)', async () => {
    const outcome = await failoverRun(false, 1_000);
    const { figures, report } = summarize('async-lagging', outcome);
    // What the user's setting (synchronous replication) rules out, shown to happen without it.
    expect(figures.acknowledgedMissingOnNewPrimary).toBeGreaterThan(0);
    // Published-without-row needs the dispatcher to have published a message within the lag
    // window before the crash: 40 in one run, 0 in two runs of the merged suite on a loaded
    // machine. Measured and printed above (docs/failure-handling.md), not asserted.
    // The outbox itself stays consistent on the new primary: what it holds goes out in order.
    expect(figures.lostAmongRowsOnNewPrimary).toBe(0);
    expect(report.orderViolations).toEqual([]);
  }, 240_000);
});
