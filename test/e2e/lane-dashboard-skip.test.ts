import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { createLaneDispatcher, fromPg, InMemoryPublisher } from '../../src/index.js';
import { CHROMIUM_ARGS } from '../fixtures/ops/dashboard-ui.js';
import { requireBinary } from '../fixtures/ops/tools.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { enqueueLanes } from '../helpers/lanes.js';

/**
 * The lanes dashboard's Skip button in headless Chromium: offered for a dead letter that holds
 * its aggregate, it gives it up (the row then says "skipped" and offers no Skip), and the
 * aggregate's later messages are published.
 */
describe('lanes dashboard in headless Chromium: Skip', () => {
  let db: TestDatabase;
  let dashboard: Dashboard | undefined;
  let browser: Browser | undefined;

  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(async () => {
    await browser?.close();
    await dashboard?.close();
    await db.drop();
  });

  it('skips a blocking dead letter from the page', async ({ skip }) => {
    const executablePath = requireBinary('chromium', 'chromium', skip);
    const written = await enqueueLanes(db.pool, [
      { topic: 'payment.charge', aggregateId: 'order-9', payload: { n: 1 } },
      { topic: 'payment.charge', aggregateId: 'order-9', payload: { n: 2 } },
    ]);
    const poison = written[0]!.messageId;
    const publisher = new InMemoryPublisher({
      inject: (m) =>
        m.id === poison ? { status: 'permanent', error: 'card declined' } : undefined,
    });
    const drain = () => createLaneDispatcher({ executor: fromPg(db.pool), publisher }).drain();
    await drain();
    expect(publisher.published).toEqual([]);

    dashboard = await startDashboard({ executor: fromPg(db.pool), engine: 'lanes', port: 0 });
    browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage();
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    await page.goto(dashboard.url);
    const button = page.locator('button[data-skip]');
    await button.waitFor();
    await button.click();
    await expect
      .poll(() => page.locator('#notice').textContent())
      .toContain('the later messages of its aggregate go on');
    await expect.poll(() => page.locator('#dead-rows').textContent()).toContain('skipped');
    expect(await page.locator('button[data-skip]').count()).toBe(0);
    expect(problems).toEqual([]);

    await drain();
    expect(publisher.published.map((m) => m.sequence)).toEqual([2]);
  }, 60_000);
});
