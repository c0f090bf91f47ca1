/**
 * Signed approval links on the lanes engine: a `createOutbox({ engine: 'lanes', approvalRequests:
 * { links } })` writer signs a link into each approval request, and `createApprovalHandler({
 * engine: 'lanes' })`, served by a real node:http server, decides through the lanes decisions;
 * the lane dispatcher then publishes the message. (Claim engine: approvals/approval-links.test.ts.)
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createApprovalHandler,
  createLaneDispatcher,
  createOutbox,
  fromPg,
  InMemoryPublisher,
  type Dispatcher,
  type OutboxMessage,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';

const secret = 'l'.repeat(16) + 'secret-for-lane-approval-links';
let db: TestDatabase;
let server: Server;
let base: string;
let running: Dispatcher[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  const handler = createApprovalHandler({
    secrets: [secret],
    executor: fromPg(db.pool),
    engine: 'lanes',
  });
  server = createServer((req, res) => void handler.node(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/approve`;
});
afterEach(async () => {
  await Promise.all(running.map((d) => d.stop()));
  running = [];
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await db.drop();
});

const outboxOf = () =>
  createOutbox({
    engine: 'lanes',
    approvalRequests: {
      topic: 'approvals.requested',
      includePayload: false,
      links: { url: base, secret, ttlMs: 60_000, by: 'alice@example.com' },
    },
  });

async function write(messages: OutboxMessage[]) {
  const client = await db.pool.connect();
  try {
    await client.query('BEGIN');
    const result = await outboxOf().enqueue(fromPg(client), messages);
    await client.query('COMMIT');
    return result;
  } finally {
    client.release();
  }
}

async function waitFor(condition: () => boolean | Promise<boolean>, ms = 15_000): Promise<void> {
  const until = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('condition not reached');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

const post = (link: string, fields: Record<string, string>) =>
  fetch(base, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: new URL(link).searchParams.get('token')!, ...fields }),
  });

describe('approval links on the lanes engine', () => {
  it('a link from the approval request approves a held lanes message; the lane dispatcher publishes it', async () => {
    const [message] = await write([
      {
        topic: 'payment.refund',
        aggregateId: 'order:lane-link-1',
        payload: { amount: 50_000 },
        requiresApproval: true,
      },
    ]);
    expect(message).toMatchObject({ awaitingApproval: true });
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 20,
    });
    dispatcher.start();
    running.push(dispatcher);
    // The request goes out with its signed link; the held message does not.
    await waitFor(() => publisher.published.some((m) => m.topic === 'approvals.requested'));
    const request = publisher.published.find((m) => m.topic === 'approvals.requested')!;
    const { approvalLink: link, messageId } = request.payload as {
      approvalLink: string;
      messageId: string;
    };
    expect(messageId).toBe(message!.messageId);
    expect(link.startsWith(`${base}?token=`)).toBe(true);
    expect(publisher.published.some((m) => m.topic === 'payment.refund')).toBe(false);

    // Opening it shows the lanes message and decides nothing.
    const shown = await fetch(link);
    expect(shown.status).toBe(200);
    expect(await shown.text()).toContain('payment.refund for order:lane-link-1');
    const decision = await db.pool.query('SELECT state FROM outbox_lane_approvals WHERE id = $1', [
      message!.id,
    ]);
    expect(decision.rows).toEqual([{ state: 'awaiting' }]);

    // Its button approves, recorded with who and how; the dispatcher then publishes it.
    const approved = await post(link, { decision: 'approve', reason: 'called the customer' });
    expect(approved.status).toBe(200);
    await waitFor(() =>
      publisher.published.some((m) => m.topic === 'payment.refund' && m.id === message!.messageId),
    );
    const after = await db.pool.query(
      'SELECT state, decided_by, note FROM outbox_lane_approvals WHERE id = $1',
      [message!.id],
    );
    expect(after.rows).toEqual([
      {
        state: 'approved',
        decided_by: 'alice@example.com (approval link)',
        note: 'called the customer',
      },
    ]);
    // A replayed link meets a decided message.
    expect((await post(link, { decision: 'reject', reason: 'too late' })).status).toBe(409);
  });

  it('a link rejects with the reason typed in; the message is never published', async () => {
    const [message] = await write([
      {
        topic: 'payment.refund',
        aggregateId: 'order:lane-link-2',
        payload: {},
        requiresApproval: true,
      },
    ]);
    const publisher = new InMemoryPublisher();
    const dispatcher = createLaneDispatcher({
      executor: fromPg(db.pool),
      publisher,
      pollIntervalMs: 20,
    });
    dispatcher.start();
    running.push(dispatcher);
    await waitFor(() =>
      publisher.published.some(
        (m) =>
          m.topic === 'approvals.requested' &&
          (m.payload as { messageId: string }).messageId === message!.messageId,
      ),
    );
    const request = publisher.published.find(
      (m) => (m.payload as { messageId?: string }).messageId === message!.messageId,
    )!;
    const link = (request.payload as { approvalLink: string }).approvalLink;
    expect((await post(link, { decision: 'reject', reason: 'duplicate' })).status).toBe(200);
    const after = await db.pool.query(
      'SELECT state, note FROM outbox_lane_approvals WHERE id = $1',
      [message!.id],
    );
    expect(after.rows).toEqual([{ state: 'rejected', note: 'duplicate' }]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(publisher.published.some((m) => m.id === message!.messageId)).toBe(false);
  });

  it('the handler validates engine', () => {
    expect(() =>
      createApprovalHandler({
        secrets: [secret],
        executor: fromPg(db.pool),
        engine: 'lane' as never,
      }),
    ).toThrow(/'claims' or 'lanes'/);
  });
});
