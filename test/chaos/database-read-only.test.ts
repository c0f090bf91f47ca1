import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { dispatchArgs, startCli } from '../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { closedPort } from '../helpers/services.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';

/**
 * The database refuses writes for a while (issue 44): `default_transaction_read_only` set on
 * the outbox's database under a running `outbox dispatch` (a separate process), its sessions
 * ended so that new ones get it, then unset. Claims and settles fail with SQLSTATE 25006
 * meanwhile. The spell lasts twice the attempt budget (`--max-attempts 2` at
 * `--lease-ms 2500`): nothing may be dead-lettered, everything goes out after, in order; and the
 * operator sees it: one log line, `outbox_database_read_only 1`, `/healthz` 503.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!().catch(() => undefined);
});

/** From the server's admin database: the test database's own sessions turn read-only. */
async function setReadOnly(db: TestDatabase, on: boolean): Promise<void> {
  const admin = new pg.Client({ connectionString: inject('adminDatabaseUrl') });
  await admin.connect();
  try {
    await admin.query(
      `ALTER DATABASE "${db.name}" SET default_transaction_read_only = ${on ? 'on' : 'off'}`,
    );
    // The setting reaches new sessions only: end the ones open now (the pools make new ones).
    if (on)
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`,
        [db.name],
      );
  } finally {
    await admin.end();
  }
}

// Two attempt budgets (2 attempts × 2.5 s leases): were a refused claim or settle charged as an
// attempt, messages would be dead-lettered within it.
const SPELL_MS = 10_000;

describe('the database turns read-only for a while under outbox dispatch', () => {
  it('nothing dead-lettered, all go out after in order; one log line, a gauge, /healthz 503', async () => {
    const db = await createTestDatabase();
    cleanups.push(() => db.drop());
    cleanups.push(() => setReadOnly(db, false));
    // Slow enough that the backlog is still going out when the database turns read-only.
    const receiver = await startWebhookReceiver({ holdMs: () => 5 });
    cleanups.push(() => receiver.close());
    const metricsPort = await closedPort();
    const dispatcher = startCli(
      dispatchArgs(
        db.url,
        receiver.url,
        '--lease-ms',
        '2500',
        '--max-attempts',
        '2',
        '--batch-size',
        '20',
        '--metrics-port',
        String(metricsPort),
      ),
    );
    cleanups.push(async () => {
      dispatcher.child.kill('SIGKILL');
      await dispatcher.exited;
    });
    const metricsUrl = `http://127.0.0.1:${metricsPort}`;
    await expect
      .poll(
        () =>
          fetch(`${metricsUrl}/healthz`).then(
            (r) => r.status,
            () => 0,
          ),
        {
          timeout: 60_000,
        },
      )
      .toBe(200);

    const written = await enqueueCommitted(db.pool, manyMessages(20, 50));
    await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBeGreaterThan(50);
    await setReadOnly(db, true);
    const deliveredAtSpell = receiver.distinct();

    // What the operator sees during the spell.
    await expect
      .poll(
        async () => {
          const response = await fetch(`${metricsUrl}/healthz`);
          return { status: response.status, body: (await response.json()) as unknown };
        },
        { timeout: 60_000 },
      )
      .toMatchObject({
        status: 503,
        body: { ok: false, databaseReadOnly: true, reason: expect.stringMatching(/read-only/) },
      });
    const metrics = await (await fetch(`${metricsUrl}/metrics`)).text();
    expect(metrics).toMatch(/^outbox_database_read_only 1$/m);
    await new Promise((resolve) => setTimeout(resolve, SPELL_MS));
    const deliveredInSpell = receiver.distinct() - deliveredAtSpell;

    await setReadOnly(db, false);
    const writableAt = performance.now();
    await expect.poll(() => receiver.distinct(), { timeout: 120_000 }).toBe(written.length);
    const firstAfter = Math.min(
      ...receiver.events.filter((e) => e.start > writableAt).map((e) => e.start),
    );

    // The last batch is delivered before it is settled: wait for the settle too.
    await expect
      .poll(
        async () =>
          (
            await db.pool.query<{ n: number }>(
              `SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL`,
            )
          ).rows[0]!.n,
        { timeout: 60_000 },
      )
      .toBe(0);
    const { rows } = await db.pool.query<{ dead: number; pending: number; retries: number }>(
      `SELECT count(*) FILTER (WHERE dead_lettered_at IS NOT NULL)::int AS dead,
              count(*) FILTER (WHERE dispatched_at IS NULL)::int AS pending,
              coalesce(sum(attempts - 1), 0)::int AS retries
         FROM outbox_messages`,
    );
    const report = checkHistory(expectedOf(written), receiver.events);
    const output = dispatcher.output();
    const figures = {
      messages: written.length,
      deliveredDuringSpell: deliveredInSpell,
      deadLettered: rows[0]!.dead,
      lost: report.lost.length,
      orderViolations: report.orderViolations.length,
      duplicates: report.duplicates,
      duplicateBound: rows[0]!.retries,
      readOnlyLogLines: output.match(/database is read-only/g)?.length ?? 0,
      resumeSeconds: Number(((firstAfter - writableAt) / 1000).toFixed(1)),
    };
    console.log(`[database read-only] ${JSON.stringify(figures)}`);
    const said = output
      .split('\n')
      .filter((line) => /warn|error|read-only|writes again/i.test(line));
    console.log(`[database read-only] dispatcher log:\n${said.slice(0, 8).join('\n')}`);
    expect(rows[0]).toMatchObject({ dead: 0, pending: 0 });
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    expect(figures.duplicates).toBeLessThanOrEqual(figures.duplicateBound);
    // Said once for the spell, not once a poll; and its end said too.
    expect(figures.readOnlyLogLines).toBe(1);
    expect(output).toMatch(/database accepts writes again/);
    expect(output).not.toMatch(/claim failed.*read-only transaction/);
    await expect.poll(() => fetch(`${metricsUrl}/healthz`).then((r) => r.status)).toBe(200);
    expect(await (await fetch(`${metricsUrl}/metrics`)).text()).toMatch(
      /^outbox_database_read_only 0$/m,
    );
  }, 240_000);
});
