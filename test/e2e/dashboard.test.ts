import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, InMemoryPublisher } from '../../src/index.js';
import type { DashboardState } from '../../src/dashboard/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { enqueueCommitted } from '../helpers/outbox-fixtures.js';
import { runOps } from '../fixtures/ops/run-ops-cli.js';
import { CHROMIUM_ARGS, startUi, stop } from '../fixtures/ops/dashboard-ui.js';
import { findBinary, requireBinary } from '../fixtures/ops/tools.js';

describe('dashboard in headless Chromium', () => {
  let db: TestDatabase;
  let browser: Browser | undefined;
  let ui: ChildProcess | undefined;
  let shots: string;
  let deadId: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    shots = await mkdtemp(join(tmpdir(), 'outbox-dashboard-'));
    // Some traffic for the charts and the histogram, and one dead letter.
    await enqueueCommitted(db.pool, [
      ...Array.from({ length: 40 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `user:${i}`,
        payload: { template: 'welcome' },
      })),
      { topic: 'payment.charge', aggregateId: 'order:7', payload: { amount: 1200 } },
    ]);
    await db.pool.query(
      `UPDATE outbox SET created_at = now() - (id % 9) * interval '1 second' WHERE topic = 'mail.send'`,
    );
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.topic === 'payment.charge' && m.attempts === 1
          ? { status: 'permanent', error: 'card declined: HTTP 402 from payments' }
          : undefined,
    });
    await createDispatcher({
      executor: fromPg(db.pool),
      publisher,
      unorderedTopics: ['*'],
    }).drain();
    const { rows } = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM outbox WHERE dead_lettered_at IS NOT NULL`,
    );
    expect(rows).toHaveLength(1);
    deadId = rows[0]!.id;
  });

  afterAll(async () => {
    await browser?.close();
    await stop(ui);
    await rm(shots, { recursive: true, force: true });
    await db.drop();
  });

  it('shows the dead letter, replays it from the page, and saves a screenshot', async ({
    skip,
  }) => {
    const executablePath = requireBinary('chromium', 'chromium', skip);
    const started = await startUi([], { DATABASE_URL: db.url });
    ui = started.child;
    expect(started.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);

    browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    const external: string[] = [];
    page.on('request', (r) => {
      if (!r.url().startsWith(started.url)) external.push(r.url());
    });

    await page.goto(started.url);
    const row = page.locator(`tr[data-dead-id="${deadId}"]`);
    await row.waitFor();
    await expect(row.textContent()).resolves.toContain('card declined: HTTP 402 from payments');
    await expect(row.textContent()).resolves.toContain('payment.charge');
    await expect(page.locator('[data-tile="dead letters"] .value').textContent()).resolves.toBe(
      '1',
    );
    // The histogram has the 40 published mails.
    await expect(page.locator('#latency-total').textContent()).resolves.toBe('40 messages');

    // Traffic while the page is open: a backlog builds up, then a dispatcher drains it. The
    // charts follow: the newest point of the backlog path rises above its zero line and comes
    // back (the paths hold a full window from the start-up history, so they do not grow), and
    // the samples after the drain count its 25 messages.
    const backlogTile = page.locator('[data-tile="backlog"] .value');
    const newestHeight = async (chart: string) => {
      const d = (await page.locator(`${chart} path.series`).getAttribute('d')) ?? '';
      const zero = Number(await page.locator(`${chart} text.tick`).first().getAttribute('y'));
      return zero - Number(d.trim().split(' ').at(-1));
    };
    await enqueueCommitted(
      db.pool,
      Array.from({ length: 25 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `late:${i}`,
        payload: {},
      })),
    );
    await page.locator('[data-tile="backlog"] .value', { hasText: /^25$/ }).waitFor();
    await expect.poll(() => newestHeight('#backlog-chart'), { timeout: 30_000 }).toBeGreaterThan(0);
    const drainStart = Date.now();
    await createDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher(),
      unorderedTopics: ['*'],
    }).drain();
    await page.locator('[data-tile="backlog"] .value', { hasText: /^0$/ }).waitFor();
    await expect(backlogTile.textContent()).resolves.toBe('0');
    await expect.poll(() => newestHeight('#backlog-chart'), { timeout: 30_000 }).toBe(0);
    const publishedSinceDrain = async () => {
      const state = (await (await fetch(`${started.url}api/state`)).json()) as DashboardState;
      // Each live sample's rate is its count over the time since the sample before (about
      // 300 ms, longer on a loaded machine): count = rate x that interval.
      let sum = 0;
      state.samples.forEach((p, i) => {
        const before = state.samples[i - 1];
        if (!before || p.at <= drainStart - 1000) return;
        sum += Math.round(((p.publishedPerSecond ?? 0) * (p.at - before.at)) / 1000);
      });
      return sum;
    };
    await expect.poll(publishedSinceDrain, { timeout: 30_000 }).toBe(25);
    await expect(page.locator('#latency-total').textContent()).resolves.toBe('65 messages');

    const screenshot = join(shots, 'dashboard.png');
    await page.screenshot({ path: screenshot, fullPage: true });
    expect((await stat(screenshot)).size).toBeGreaterThan(10_000);
    // docs/dashboard.png comes from dashboard-history.test.ts (charts with history).

    await page.locator(`button[data-replay="${deadId}"]`).click();
    await page.locator('#notice', { hasText: `replayed #${deadId}` }).waitFor();
    await row.waitFor({ state: 'detached' });
    const { rows } = await db.pool.query<{ dead: boolean; attempts: number; dispatched: boolean }>(
      `SELECT dead_lettered_at IS NOT NULL AS dead, attempts, dispatched_at IS NOT NULL AS dispatched
         FROM outbox WHERE id = $1`,
      [deadId],
    );
    expect(rows[0]).toEqual({ dead: false, attempts: 0, dispatched: false });
    await page.locator('#dead-empty').waitFor({ state: 'visible' });

    expect(problems).toEqual([]);
    expect(external).toEqual([]);
  });

  it('with --token, the page asks for the token and the API refuses calls without it', async ({
    skip,
  }) => {
    const executablePath = findBinary('chromium') ?? requireBinary('chromium', 'chromium', skip);
    await db.pool.query(
      `UPDATE outbox SET dead_lettered_at = now(), last_error = 'gave up' WHERE id = $1`,
      [deadId],
    );
    const token = 'correct-horse-battery';
    const { url, child } = await startUi(['--token', token], { DATABASE_URL: db.url });
    try {
      expect((await fetch(`${url}api/state`)).status).toBe(401);
      const replayWithout = await fetch(`${url}api/replay`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ids: [deadId] }),
      });
      expect(replayWithout.status).toBe(401);
      // A cross-site form post (no JSON content type) is refused even with the token.
      const crossSite = await fetch(`${url}api/replay`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'text/plain',
          origin: 'http://evil.example',
        },
        body: JSON.stringify({ ids: [deadId] }),
      });
      expect(crossSite.status).toBe(403);
      expect(
        (
          await db.pool.query(
            `SELECT 1 FROM outbox WHERE id = $1 AND dead_lettered_at IS NOT NULL`,
            [deadId],
          )
        ).rowCount,
      ).toBe(1);

      browser ??= await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
      const page = await browser.newPage();
      await page.goto(url);
      await page.locator('#token-form.shown').waitFor();
      await page.locator('#token').fill(token);
      await page.locator('#token-form button').click();
      await page.locator(`button[data-replay="${deadId}"]`).click();
      await page.locator(`tr[data-dead-id="${deadId}"]`).waitFor({ state: 'detached' });
      const { rows } = await db.pool.query<{ dead: boolean }>(
        `SELECT dead_lettered_at IS NOT NULL AS dead FROM outbox WHERE id = $1`,
        [deadId],
      );
      expect(rows[0]!.dead).toBe(false);
    } finally {
      await stop(child);
    }
  });

  it('refuses to start on a non-loopback host without a token (exit 2)', async () => {
    const result = await runOps(['ui', '--host', '0.0.0.0', '--port', '0'], {
      DATABASE_URL: db.url,
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/give --token/);
  });
});
