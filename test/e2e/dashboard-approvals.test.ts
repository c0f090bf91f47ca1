/**
 * Issue 20: the dashboard's approvals panel in headless Chromium — held messages listed, Approve
 * and Reject (a reason required) from the page, who decided kept with the message — and the new
 * endpoints behind the same token and Origin checks as replay.
 */
import type { ChildProcess } from 'node:child_process';
import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EnqueuedMessage } from '../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { enqueueCommitted } from '../helpers/outbox-fixtures.js';
import { runOps } from '../fixtures/ops/run-ops-cli.js';
import { CHROMIUM_ARGS, startUi, stop } from '../fixtures/ops/dashboard-ui.js';
import { findBinary, requireBinary } from '../fixtures/ops/tools.js';

describe('dashboard approvals panel in headless Chromium', () => {
  let db: TestDatabase;
  let browser: Browser | undefined;
  const children: ChildProcess[] = [];
  let held: EnqueuedMessage[];

  beforeAll(async () => {
    db = await createTestDatabase();
    held = await enqueueCommitted(db.pool, [
      {
        topic: 'payment.refund',
        aggregateId: 'order:1',
        payload: { amount: 50_000, currency: 'JPY' },
        requiresApproval: true,
        approvalRequestedBy: 'tool refund_order · idempotency key req-1',
      },
      {
        topic: 'payment.refund',
        aggregateId: 'order:2',
        payload: { amount: 75_000, currency: 'JPY' },
        requiresApproval: true,
      },
      {
        topic: 'payment.payout',
        aggregateId: 'seller:9',
        payload: { amount: 120_000 },
        requiresApproval: true,
      },
    ]);
  });

  afterAll(async () => {
    await browser?.close();
    for (const child of children) await stop(child);
    await db.drop();
  });

  const state = async (id: string) =>
    (
      await db.pool.query<{
        approval_state: string;
        approval_decided_by: string | null;
        approval_note: string | null;
      }>(`SELECT approval_state, approval_decided_by, approval_note FROM outbox WHERE id = $1`, [
        id,
      ])
    ).rows[0]!;

  it('lists held messages; Approve and Reject (reason required) decide them, as the named person', async ({
    skip,
  }) => {
    const executablePath = requireBinary('chromium', 'chromium', skip);
    const started = await startUi([], { DATABASE_URL: db.url });
    children.push(started.child);
    browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const problems: string[] = [];
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    await page.goto(started.url);

    const [a, b] = held;
    const rowA = page.locator(`tr[data-approval-id="${a!.id}"]`);
    const rowB = page.locator(`tr[data-approval-id="${b!.id}"]`);
    await rowA.waitFor();
    await expect(rowA.textContent()).resolves.toContain('payment.refund');
    await expect(rowA.textContent()).resolves.toContain('order:1');
    await expect(rowA.textContent()).resolves.toContain(
      'tool refund_order · idempotency key req-1',
    );
    await expect(rowA.textContent()).resolves.toContain('{"amount":50000,"currency":"JPY"}');
    await expect(
      page.locator('[data-tile="awaiting approval"] .value').textContent(),
    ).resolves.toBe('3');

    // No name yet: the page asks for one and decides nothing.
    await page.locator(`button[data-approve="${a!.id}"]`).click();
    await page.locator('#notice', { hasText: 'enter your name' }).waitFor();
    expect((await state(a!.id)).approval_state).toBe('awaiting');

    await page.locator('#decider').fill('ops-alice');
    await page.locator(`button[data-approve="${a!.id}"]`).click();
    await page.locator('#notice', { hasText: `approved #${a!.id} as ops-alice` }).waitFor();
    await rowA.waitFor({ state: 'detached' });
    expect(await state(a!.id)).toMatchObject({
      approval_state: 'approved',
      approval_decided_by: 'ops-alice',
    });

    // Reject needs a reason: the button stays disabled until one is typed — and the typed reason
    // survives the page's periodic refresh.
    const rejectB = page.locator(`button[data-reject="${b!.id}"]`);
    await expect(rejectB.isDisabled()).resolves.toBe(true);
    await page.locator(`input[data-reason-for="${b!.id}"]`).fill('customer withdrew the claim');
    await page.waitForTimeout(3_500);
    await expect(page.locator(`input[data-reason-for="${b!.id}"]`).inputValue()).resolves.toBe(
      'customer withdrew the claim',
    );
    await rejectB.click();
    await page.locator('#notice', { hasText: `rejected #${b!.id} as ops-alice` }).waitFor();
    await rowB.waitFor({ state: 'detached' });
    expect(await state(b!.id)).toEqual({
      approval_state: 'rejected',
      approval_decided_by: 'ops-alice',
      approval_note: 'customer withdrew the claim',
    });
    await expect(
      page.locator('[data-tile="awaiting approval"] .value').textContent(),
    ).resolves.toBe('1');

    // The API refuses a rejection without a reason, and a second decision (409).
    const post = (path: string, body: unknown) =>
      fetch(`${started.url}api/${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const noReason = await post('reject', { ids: [held[2]!.id], by: 'x' });
    expect(noReason.status).toBe(400);
    expect(((await noReason.json()) as { error: string }).error).toMatch(/needs a reason/);
    const twice = await post('approve', { ids: [a!.id], by: 'ops-bob' });
    expect(twice.status).toBe(409);
    expect(((await twice.json()) as { error: string }).error).toMatch(
      /already approved by ops-alice/,
    );
    expect(problems).toEqual([]);
  });

  it('with --token: the decisions need the token, and a cross-site post is refused', async ({
    skip,
  }) => {
    const executablePath = findBinary('chromium') ?? requireBinary('chromium', 'chromium', skip);
    const token = 'correct-horse-battery';
    const { url, child } = await startUi(['--token', token], { DATABASE_URL: db.url });
    children.push(child);
    const target = held[2]!;
    const post = (path: string, headers: Record<string, string>, body: unknown) =>
      fetch(`${url}api/${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
    for (const path of ['approve', 'reject']) {
      const body = { ids: [target.id], by: 'mallory', reason: 'because' };
      expect((await post(path, { 'content-type': 'application/json' }, body)).status).toBe(401);
      expect(
        (
          await post(
            path,
            {
              authorization: `Bearer ${token}`,
              'content-type': 'text/plain',
              origin: 'http://evil.example',
            },
            body,
          )
        ).status,
      ).toBe(403);
      expect(
        (
          await post(
            path,
            {
              authorization: `Bearer ${token}`,
              'content-type': 'application/json',
              origin: 'http://evil.example',
            },
            body,
          )
        ).status,
      ).toBe(403);
    }
    expect((await state(target.id)).approval_state).toBe('awaiting');

    browser ??= await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
    const page = await browser.newPage();
    await page.goto(url);
    await page.locator('#token-form.shown').waitFor();
    await page.locator('#token').fill(token);
    await page.locator('#token-form button').click();
    await page.locator('#decider').fill('ops-carol');
    await page.locator(`input[data-reason-for="${target.id}"]`).fill('duplicate payout');
    await page.locator(`button[data-reject="${target.id}"]`).click();
    await page.locator(`tr[data-approval-id="${target.id}"]`).waitFor({ state: 'detached' });
    expect(await state(target.id)).toEqual({
      approval_state: 'rejected',
      approval_decided_by: 'ops-carol',
      approval_note: 'duplicate payout',
    });
  });

  it('refuses an unknown --dead-letter-policy (exit 2)', async () => {
    const result = await runOps(['ui', '--port', '0', '--dead-letter-policy', 'drop'], {
      DATABASE_URL: db.url,
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--dead-letter-policy must be hold or skip/);
  });
});
