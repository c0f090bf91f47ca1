/**
 * Issue 26, item 5: the dashboard's nits, in headless Chromium. The charts start with the history
 * the database already has (rebuilt point for point from the rows' timestamps), labels are at
 * least 11 px on screen, "Last errors" does not repeat the dead letter, and the reject reason's
 * placeholder fits its box. `UPDATE_DASHBOARD_SCREENSHOT=1` rewrites docs/dashboard.png.
 */
import type { ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, InMemoryPublisher } from '../../src/index.js';
import type { DashboardState } from '../../src/dashboard/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { enqueueCommitted } from '../helpers/outbox-fixtures.js';
import { CHROMIUM_ARGS, startUi, stop } from '../fixtures/ops/dashboard-ui.js';
import { requireBinary } from '../fixtures/ops/tools.js';

/** startUi's --sample-interval-ms: the history's points are this far apart. */
const INTERVAL_MS = 300;
const HISTORY = 200;
const PENDING = 5;

/** A seeded row's time in the backlog: [entered, gone), ms since the epoch. */
interface Span {
  entered: number;
  gone: number;
}

// The project compiles without the DOM lib: the few browser shapes these checks use.
interface Rect {
  left: number;
  right: number;
}
interface Box {
  getBoundingClientRect(): Rect;
  closest(selector: string): (Box & { scrollWidth: number; clientWidth: number }) | null;
  getAttribute(name: string): string | null;
}
interface SvgText extends Box {
  ownerSVGElement: { getScreenCTM(): { a: number } | null } | null;
}
interface TextInput extends Box {
  value: string;
  placeholder: string;
  scrollWidth: number;
  clientWidth: number;
}
declare const getComputedStyle: (node: unknown) => { fontSize: string };

describe('dashboard history, labels, errors and layout in headless Chromium', () => {
  let db: TestDatabase;
  let browser: Browser | undefined;
  let ui: ChildProcess | undefined;
  let seededAt: number;
  let deadId: string;
  let retryingId: string;
  const spans: Span[] = [];
  let deadSince: number;

  beforeAll(async () => {
    db = await createTestDatabase();
    // 200 messages and one that the broker refuses for good, dispatched now by a real
    // dispatcher, then moved into the past: created 200 s ago, two dispatched per second from
    // 150 s to 51 s ago; the refused one created 130 s ago and dead-lettered 120 s ago.
    await enqueueCommitted(db.pool, [
      ...Array.from({ length: HISTORY }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `user:${i}`,
        payload: { template: 'welcome' },
      })),
      { topic: 'payment.charge', aggregateId: 'order:7', payload: { amount: 1200 } },
    ]);
    await createDispatcher({
      executor: fromPg(db.pool),
      publisher: new InMemoryPublisher({
        inject: (m) =>
          m.topic === 'payment.charge'
            ? { status: 'permanent', error: 'card declined: HTTP 402 from payments' }
            : undefined,
      }),
      unorderedTopics: ['*'],
    }).drain();
    // Five still pending (created 100 s ago), one of them retrying after an error, and one held
    // for approval (never backlog).
    const pending = await enqueueCommitted(db.pool, [
      ...Array.from({ length: PENDING }, (_, i) => ({
        topic: 'search.index',
        aggregateId: `doc:${i}`,
        payload: {},
      })),
      {
        topic: 'payment.refund',
        aggregateId: 'order:9',
        payload: { amount: 50_000 },
        requiresApproval: true,
      },
    ]);
    retryingId = pending[0]!.id;
    const { rows } = await db.pool.query<{ now: number }>(
      `SELECT (extract(epoch FROM now()) * 1000)::float8 AS now`,
    );
    seededAt = rows[0]!.now;
    const at = `to_timestamp($1::float8 / 1000)`;
    await db.pool.query(
      // Dispatched messages are in batch rows of the dispatched ring's current slot (migrations
      // 018 and 021), one dispatch time per batch: each is rewritten here as a batch of its own,
      // dispatched at a second of its own.
      `WITH old AS (DELETE FROM outbox_dispatched_batch_0 RETURNING messages),
            m AS (
              SELECT r.id, r.message_id,
                     ${at} - interval '150 s' + ((r.id - 1) % 100) * interval '1 s' AS dispatched_at,
                     to_jsonb(r) || jsonb_build_object('created_at', ${at} - interval '200 s') AS message
              FROM old, unnest(old.messages) r
              WHERE r.topic = 'mail.send')
       INSERT INTO outbox_dispatched_batch_0 (ids, message_ids, dispatched_at, message_count, messages)
       SELECT int8range(id, id, '[]'), outbox_uuid_range(message_id, message_id, '[]'), dispatched_at,
              1, ARRAY[jsonb_populate_record(NULL::outbox_dispatched_message,
                         message || jsonb_build_object('dispatched_at', dispatched_at))]
       FROM m`,
      [seededAt],
    );
    const dead = await db.pool.query<{ id: string }>(
      `UPDATE outbox SET created_at = ${at} - interval '130 s', dead_lettered_at = ${at} - interval '120 s'
        WHERE topic = 'payment.charge' RETURNING id::text`,
      [seededAt],
    );
    deadId = dead.rows[0]!.id;
    await db.pool.query(
      `UPDATE outbox SET created_at = ${at} - interval '100 s' WHERE topic = 'search.index'`,
      [seededAt],
    );
    await db.pool.query(
      `UPDATE outbox SET attempts = 1, last_error = 'timeout: broker slow', available_at = now() + interval '1 hour'
        WHERE id = $1`,
      [retryingId],
    );
    const ids = await db.pool.query<{ id: string }>(
      `SELECT id::text FROM outbox_messages WHERE topic = 'mail.send' ORDER BY id`,
    );
    expect(ids.rows).toHaveLength(HISTORY);
    for (const { id } of ids.rows)
      spans.push({
        entered: seededAt - 200_000,
        gone: seededAt - 150_000 + ((Number(id) - 1) % 100) * 1000,
      });
    spans.push({ entered: seededAt - 130_000, gone: seededAt - 120_000 });
    for (let i = 0; i < PENDING; i++) spans.push({ entered: seededAt - 100_000, gone: Infinity });
    deadSince = seededAt - 120_000;
  });

  afterAll(async () => {
    await browser?.close();
    await stop(ui);
    await db.drop();
  });

  const expectedBacklog = (t: number) => spans.filter((s) => s.entered <= t && t < s.gone).length;

  /** Rendered size (CSS font size times the SVG's scale) of every `selector` text. */
  const labelSizes = (page: Page, selector: string) =>
    page.locator(selector).evaluateAll((nodes) =>
      nodes.map((node) => {
        const text = node as unknown as SvgText;
        const scale = text.ownerSVGElement!.getScreenCTM()!.a;
        return parseFloat(getComputedStyle(text).fontSize) * scale;
      }),
    );

  it('starts with the history, readable labels, each error once and the whole placeholder', async ({
    skip,
  }) => {
    const executablePath = requireBinary('chromium', 'chromium', skip);
    const started = await startUi([], { DATABASE_URL: db.url });
    ui = started.child;

    // The API: the history is there at once, and each point is what the rows say.
    const state = (await (await fetch(`${started.url}api/state`)).json()) as DashboardState;
    expect(state.samples.length).toBeGreaterThan(600);
    const mismatches = state.samples
      .map((p) => ({ at: p.at - seededAt, got: p.backlog, want: expectedBacklog(p.at) }))
      .filter((p) => p.got !== p.want);
    expect(mismatches).toEqual([]);
    expect(state.samples.map((p) => p.deadLetters)).toEqual(
      state.samples.map((p) => (p.at >= deadSince ? 1 : 0)),
    );
    const dispatched = state.samples.reduce(
      (sum, p) => sum + Math.round(((p.publishedPerSecond ?? 0) * INTERVAL_MS) / 1000),
      0,
    );
    expect(dispatched).toBe(HISTORY);
    expect(state.lastErrors.map((e) => e.id)).toEqual([retryingId]);

    browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    await page.goto(started.url);
    await page.locator(`tr[data-dead-id="${deadId}"]`).waitFor();

    // Charts drawn from the first render: a path of hundreds of points, the rate one too.
    const points = async (chart: string) =>
      ((await page.locator(`${chart} path.series`).getAttribute('d')) ?? '').split(/[ML]/).length -
      1;
    expect(await points('#backlog-chart')).toBeGreaterThan(600);
    expect(await points('#rate-chart')).toBeGreaterThan(600);
    await expect(page.locator('[data-tile="backlog"] .value').textContent()).resolves.toBe(
      String(PENDING),
    );

    // Labels: at least 11 px on screen, and the histogram's bucket labels do not overlap.
    const sizes = [
      ...(await labelSizes(page, '#backlog-chart text')),
      ...(await labelSizes(page, '#rate-chart text')),
      ...(await labelSizes(page, '#latency-chart text')),
    ];
    expect(sizes.length).toBeGreaterThan(10);
    expect(Math.min(...sizes)).toBeGreaterThanOrEqual(11);
    const buckets = await page.locator('#latency-chart text.bucket').evaluateAll((nodes) =>
      nodes.map((n) => {
        const { left, right } = (n as unknown as Box).getBoundingClientRect();
        return { left, right };
      }),
    );
    expect(buckets).toHaveLength(10);
    for (let i = 1; i < buckets.length; i++)
      expect(buckets[i]!.left).toBeGreaterThanOrEqual(buckets[i - 1]!.right);

    // Last errors: the retrying message once, the dead letter only in its own panel.
    const errorIds = await page
      .locator('#errors tr')
      .evaluateAll((rows) => rows.map((r) => (r as unknown as Box).getAttribute('data-error-id')));
    expect(errorIds).toEqual([retryingId]);
    await expect(page.locator('#errors').textContent()).resolves.not.toContain('card declined');
    await expect(page.locator('#dead-rows').textContent()).resolves.toContain('card declined');

    // The reject reason: its placeholder, typed as a value in the same font, fits the box, and
    // the box and the table stay inside their panel.
    const reason = page.locator('input[data-reason-for]');
    await reason.waitFor();
    const fit = await reason.evaluate((node) => {
      const input = node as unknown as TextInput;
      input.value = input.placeholder;
      const result = {
        placeholder: input.placeholder,
        scrollWidth: input.scrollWidth,
        clientWidth: input.clientWidth,
        inputRight: input.getBoundingClientRect().right,
        cellRight: input.closest('td')!.getBoundingClientRect().right,
        tableWidth: input.closest('table')!.scrollWidth,
        panelWidth: input.closest('section')!.clientWidth,
      };
      input.value = '';
      return result;
    });
    expect(fit.placeholder).toMatch(/reason/);
    expect(fit.scrollWidth).toBeLessThanOrEqual(fit.clientWidth);
    expect(fit.inputRight).toBeLessThanOrEqual(fit.cellRight);
    expect(fit.tableWidth).toBeLessThanOrEqual(fit.panelWidth);

    if (process.env.UPDATE_DASHBOARD_SCREENSHOT === '1')
      await page.screenshot({
        path: fileURLToPath(new URL('../../docs/dashboard.png', import.meta.url)),
        fullPage: true,
      });
    expect(problems).toEqual([]);
  });
});
