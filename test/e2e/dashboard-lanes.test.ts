/**
 * `outbox ui --engine lanes` in its own process: the JSON API and the page on the lanes engine —
 * backlog, dead letters replayed from the dashboard through the lane admin, the published rate
 * and latency counted from the lane cursors, approvals refused — and the page in headless
 * Chromium when it is installed (skipped with the reason printed when not, as dashboard.test.ts).
 */
import type { ChildProcess } from 'node:child_process';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DashboardState } from '../../src/dashboard/index.js';
import { createLaneDispatcher } from '../../src/lanes/lane-dispatcher.js';
import type { Publisher } from '../../src/publishers/publisher.js';
import { fromPg } from '../../src/store/from-pg.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { enqueueLanes } from '../helpers/lanes.js';
import { CHROMIUM_ARGS, startUi, stop } from '../fixtures/ops/dashboard-ui.js';
import { requireBinary } from '../fixtures/ops/tools.js';
import { runOps } from '../fixtures/ops/run-ops-cli.js';

/** Publishes everything but `payment.charge`, which the broker refuses for good. */
const refusingCharges: Publisher = {
  publish: async (messages) =>
    messages.map((m) =>
      m.topic === 'payment.charge'
        ? { status: 'permanent' as const, error: 'card declined: HTTP 402 from payments' }
        : { status: 'published' as const },
    ),
};
const publishAll: Publisher = {
  publish: async (messages) => messages.map(() => ({ status: 'published' as const })),
};

const mails = (n: number, prefix: string) =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'mail.send',
    aggregateId: `${prefix}:${i}`,
    payload: { template: 'welcome' },
  }));

describe('outbox ui --engine lanes', () => {
  let db: TestDatabase;
  let browser: Browser | undefined;
  const children: ChildProcess[] = [];

  const drain = (publisher: Publisher) =>
    createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();

  /** Messages the samples after `since` counted (rate × interval, as the page draws them). */
  const publishedSince = (state: DashboardState, since: number) => {
    let sum = 0;
    state.samples.forEach((p, i) => {
      const before = state.samples[i - 1];
      if (!before || p.at <= since) return;
      sum += ((p.publishedPerSecond ?? 0) * (p.at - before.at)) / 1000;
    });
    return Math.round(sum);
  };

  async function deadLetterOf(aggregateId: string): Promise<string> {
    await enqueueLanes(db.pool, [{ topic: 'payment.charge', aggregateId, payload: { amount: 1 } }]);
    await drain(refusingCharges);
    const { rows } = await db.pool.query<{ messageId: string }>(
      `SELECT m.message_id::text AS "messageId" FROM outbox_lane_parked p
         JOIN outbox_lane_messages m USING (lane, id)
        WHERE p.dead_at IS NOT NULL AND m.aggregate_id = $1`,
      [aggregateId],
    );
    expect(rows).toHaveLength(1);
    return rows[0]!.messageId;
  }

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await browser?.close();
    for (const child of children) await stop(child);
    await db?.drop();
  });

  it('serves the state, counts a drain from the cursors, decides a held message, replays a dead letter', async () => {
    await enqueueLanes(db.pool, mails(40, 'user'));
    const deadId = await deadLetterOf('order:7');
    const started = await startUi(['--engine', 'lanes'], { DATABASE_URL: db.url });
    children.push(started.child);
    const api = async (path: string, body?: unknown) => {
      const response = await fetch(`${started.url}api/${path}`, {
        method: body === undefined ? 'GET' : 'POST',
        headers: { 'content-type': 'application/json' },
        ...(body !== undefined && { body: JSON.stringify(body) }),
      });
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };
    const state = async () => (await api('state')).body as unknown as DashboardState;

    const page = await fetch(started.url);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'sha256-");
    expect(await page.text()).toContain('id="latency-title"');

    const first = await state();
    expect(first.engine).toBe('lanes');
    expect(first.status).toMatchObject({ backlog: 0, deadLetters: 1, awaitingApproval: 0 });
    expect(first.deadLetters).toHaveLength(1);
    expect(first.deadLetters[0]).toMatchObject({
      messageId: deadId,
      topic: 'payment.charge',
      aggregateId: 'order:7',
      lastError: 'card declined: HTTP 402 from payments',
    });
    expect(first.deadLetters[0]!.id).toMatch(/^\d+:\d+$/);
    expect(first.approvals).toEqual([]);
    expect(first.callApprovals).toEqual([]);
    // The 40 went out before the dashboard started: the charts start from its first sample.
    expect(first.latency.total).toBe(0);

    // Traffic while it runs: a backlog of 25, then a drain; the samples count the 25.
    await enqueueLanes(db.pool, mails(25, 'late'));
    await expect.poll(async () => (await state()).status.backlog, { timeout: 20_000 }).toBe(25);
    const drainStart = Date.now();
    expect((await drain(publishAll)).published).toBe(25);
    await expect.poll(async () => (await state()).status.backlog, { timeout: 20_000 }).toBe(0);
    await expect
      .poll(async () => publishedSince(await state(), drainStart - 1_000), { timeout: 20_000 })
      .toBe(25);
    const after = await state();
    expect(after.latency.total).toBe(25);
    expect(after.samples.some((p) => p.publishedEstimated)).toBe(false);

    // Approvals: a held lanes message is in the panel and is decided from it (migration 027);
    // a dead letter is no held message: deciding it is refused (409), nothing changes.
    const approve = await api('approve', { ids: [deadId], by: 'alice' });
    expect(approve.status).toBe(409);
    const [held] = await enqueueLanes(db.pool, [
      { topic: 'payment.refund', aggregateId: 'refund-1', payload: {}, requiresApproval: true },
    ]);
    await expect
      .poll(async () => (await state()).approvals.map((a) => a.messageId), { timeout: 20_000 })
      .toEqual([held!.messageId]);
    expect((await state()).status.awaitingApproval).toBe(1);
    const approved = await api('approve', { ids: [held!.messageId], by: 'alice', note: 'ok' });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    await expect.poll(async () => (await state()).approvals.length, { timeout: 20_000 }).toBe(0);
    const approvedStart = (await state()).samples.at(-1)!.at;
    expect((await drain(publishAll)).published).toBe(1);
    // It went out from the parked rows: counted once, before the replay below is.
    await expect
      .poll(async () => publishedSince(await state(), approvedStart), { timeout: 20_000 })
      .toBe(1);

    // Replay from the dashboard: by message id (a row id is refused), then it goes out.
    const byRowId = await api('replay', { ids: [first.deadLetters[0]!.id] });
    expect(byRowId.status).toBe(400);
    const replayed = await api('replay', { ids: [deadId] });
    expect(replayed.status).toBe(200);
    expect(replayed.body.replayed).toEqual([
      { id: first.deadLetters[0]!.id, messageId: deadId, topic: 'payment.charge' },
    ]);
    const { rows } = await db.pool.query(
      `SELECT dead_at IS NOT NULL AS dead, attempts FROM outbox_lane_parked`,
    );
    expect(rows).toEqual([{ dead: false, attempts: 0 }]);
    // Counted from the newest sample on: the 25 were all counted by then.
    const replayStart = (await state()).samples.at(-1)!.at;
    expect((await drain(publishAll)).published).toBe(1);
    await expect.poll(async () => (await state()).status.deadLetters, { timeout: 20_000 }).toBe(0);
    expect((await state()).deadLetters).toEqual([]);
    // The replayed message left the parked rows: counted as published once.
    await expect
      .poll(async () => publishedSince(await state(), replayStart), { timeout: 20_000 })
      .toBe(1);
  }, 120_000);

  it('refuses an unknown --engine (exit 2)', async () => {
    const result = await runOps(['ui', '--engine', 'queues', '--port', '0'], {
      DATABASE_URL: db.url,
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--engine must be claims or lanes, got "queues"/);
  });

  it('shows the lanes dead letter in headless Chromium and replays it from the page', async ({
    skip,
  }) => {
    const executablePath = requireBinary('chromium', 'chromium', skip);
    const deadId = await deadLetterOf('order:8');
    const started = await startUi(['--engine', 'lanes'], { DATABASE_URL: db.url });
    children.push(started.child);
    browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    await page.goto(started.url);
    const row = page.locator('tr[data-dead-id]');
    await row.waitFor();
    await expect(row.textContent()).resolves.toContain('card declined: HTTP 402 from payments');
    // Held messages on lanes (migration 027): the panel is there, empty, and so is its tile.
    await expect(page.locator('#approvals').isHidden()).resolves.toBe(false);
    await expect(page.locator('[data-tile="awaiting approval"]').count()).resolves.toBe(1);
    await expect(page.locator('#latency-title').textContent()).resolves.toMatch(/upper bound/);
    await page.locator('button[data-replay]').click();
    await page.locator('#notice', { hasText: 'replayed #' }).waitFor();
    await row.waitFor({ state: 'detached' });
    const { rows } = await db.pool.query(
      `SELECT p.dead_at IS NOT NULL AS dead FROM outbox_lane_parked p
         JOIN outbox_lane_messages m USING (lane, id) WHERE m.message_id = $1`,
      [deadId],
    );
    expect(rows).toEqual([{ dead: false }]);
    expect(problems).toEqual([]);
  }, 120_000);
});
