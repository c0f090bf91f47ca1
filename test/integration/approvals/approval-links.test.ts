/**
 * Issue 28, item 3: a person decides from a signed, expiring link (Slack, email). The handler
 * keeps no state; the decision is the record. Served by a real node:http server on Postgres.
 */
import { createHmac } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approvalLink,
  approveMessages,
  createApprovalHandler,
  createOutbox,
  fromPg,
  OutboxValidationError,
  verifyApprovalToken,
} from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';

const secret = 'a'.repeat(16) + 'secret-for-approval-links-tests';
const retired = 'r'.repeat(40);

let db: TestDatabase;
let server: Server;
let base: string;

beforeAll(async () => {
  db = await createTestDatabase();
  const handler = createApprovalHandler({
    secrets: [secret, retired],
    executor: fromPg(db.pool),
  });
  server = createServer((req, res) => void handler.node(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/approve`;
});
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  await db.drop();
});

const held = async (aggregateId: string) => {
  const [message] = await enqueueCommitted(db.pool, [
    { topic: 'payment.refund', aggregateId, payload: { amount: 50_000 }, requiresApproval: true },
  ]);
  return message!;
};
const stateOf = async (messageId: string) =>
  (
    await db.pool.query<{
      approval_state: string;
      approval_decided_by: string | null;
      approval_note: string | null;
    }>(
      'SELECT approval_state, approval_decided_by, approval_note FROM outbox WHERE message_id = $1',
      [messageId],
    )
  ).rows[0]!;
const post = (link: string, fields: Record<string, string>) =>
  fetch(base, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: new URL(link).searchParams.get('token')!, ...fields }),
  });

describe('approval links', () => {
  it('opening the link shows the message and decides nothing; its button approves, recorded with who and how', async () => {
    const message = await held('order:link-1');
    const link = approvalLink(message, {
      url: base,
      secret,
      ttlMs: 60_000,
      by: 'alice@example.com',
    });
    const shown = await fetch(link);
    expect(shown.status).toBe(200);
    const html = await shown.text();
    expect(html).toContain('payment.refund for order:link-1');
    expect(html).toContain('value="approve"');
    expect((await stateOf(message.messageId)).approval_state).toBe('awaiting');

    const approved = await post(link, { decision: 'approve' });
    expect(approved.status).toBe(200);
    expect(await stateOf(message.messageId)).toEqual({
      approval_state: 'approved',
      approval_decided_by: 'alice@example.com (approval link)',
      approval_note: null,
    });
  });

  it('a replayed link is refused (409) and changes nothing: the first decision stands', async () => {
    const message = await held('order:link-2');
    const link = approvalLink(message, { url: base, secret, by: 'bob' });
    expect((await post(link, { decision: 'reject', reason: 'not this one' })).status).toBe(200);
    const replay = await post(link, { decision: 'approve' });
    expect(replay.status).toBe(409);
    expect(await replay.text()).toMatch(
      /rejected by bob \(approval link\): the first decision stands/,
    );
    expect((await fetch(link)).status).toBe(409);
    expect(await stateOf(message.messageId)).toEqual({
      approval_state: 'rejected',
      approval_decided_by: 'bob (approval link)',
      approval_note: 'not this one',
    });
  });

  it('a decision made elsewhere first (the API) wins over the link', async () => {
    const message = await held('order:link-3');
    const link = approvalLink(message, { url: base, secret });
    await approveMessages(fromPg(db.pool), [message.messageId], { by: 'carol' });
    const late = await post(link, { decision: 'reject' });
    expect(late.status).toBe(409);
    expect((await stateOf(message.messageId)).approval_decided_by).toBe('carol');
  });

  it('a tampered token is refused (401): another message id, a forged signature, garbage', async () => {
    const message = await held('order:link-4');
    const other = await held('order:link-4b');
    const link = approvalLink(message, { url: base, secret });
    const token = new URL(link).searchParams.get('token')!;
    const [body, signature] = token.split('.');
    const payload = JSON.parse(Buffer.from(body!, 'base64url').toString()) as { m: string };
    const swapped = Buffer.from(JSON.stringify({ ...payload, m: other.messageId })).toString(
      'base64url',
    );
    const forged = approvalLink(message, { url: base, secret: 'x'.repeat(40) });
    for (const bad of [
      `${swapped}.${signature}`,
      new URL(forged).searchParams.get('token')!,
      'garbage',
      '',
    ]) {
      const response = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ token: bad, decision: 'approve' }),
      });
      expect(response.status, bad).toBe(401);
    }
    expect((await stateOf(message.messageId)).approval_state).toBe('awaiting');
    expect((await stateOf(other.messageId)).approval_state).toBe('awaiting');
  });

  it('an expired link is refused (410); a retired secret still verifies its links', async () => {
    const message = await held('order:link-5');
    const old = approvalLink(message, { url: base, secret, ttlMs: 1000, now: Date.now() - 5000 });
    expect((await fetch(old)).status).toBe(410);
    expect((await post(old, { decision: 'approve' })).status).toBe(410);
    expect((await stateOf(message.messageId)).approval_state).toBe('awaiting');

    const fromRetired = approvalLink(message, { url: base, secret: retired });
    expect((await post(fromRetired, { decision: 'approve' })).status).toBe(200);
    expect((await stateOf(message.messageId)).approval_state).toBe('approved');
  });

  it("an approval past its own deadline is refused (410), whatever the link's ttl", async () => {
    const [message] = await enqueueCommitted(db.pool, [
      {
        topic: 'payment.refund',
        aggregateId: 'order:link-6',
        payload: {},
        requiresApproval: true,
        approvalExpiresInMs: 1,
      },
    ]);
    await db.pool.query(
      `UPDATE outbox SET approval_expires_at = now() - interval '1 second' WHERE message_id = $1`,
      [message!.messageId],
    );
    const link = approvalLink(message!, { url: base, secret });
    expect((await post(link, { decision: 'approve' })).status).toBe(410);
  });

  it('the fetch-style handler answers the same way', async () => {
    const handler = createApprovalHandler({ secrets: [secret], executor: fromPg(db.pool) });
    const message = await held('order:link-7');
    const link = approvalLink(message, { url: 'https://ops.example.com/approve', secret });
    expect((await handler.fetch(new Request(link))).status).toBe(200);
    const decided = await handler.fetch(
      new Request('https://ops.example.com/approve', {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({
          token: new URL(link).searchParams.get('token')!,
          decision: 'approve',
        }),
      }),
    );
    expect(decided.status).toBe(200);
    expect((await stateOf(message.messageId)).approval_decided_by).toBe('approval link');
  });

  it('the approval request message carries the link, and the link decides', async () => {
    const writer = createOutbox({
      approvalRequests: {
        topic: 'approvals.requested',
        links: { url: base, secret, ttlMs: 3_600_000, by: 'payments-oncall' },
      },
    });
    const client = await db.pool.connect();
    let heldId: string;
    try {
      await client.query('BEGIN');
      const message = await writer.enqueue(fromPg(client), {
        topic: 'payment.refund',
        aggregateId: 'order:link-8',
        payload: { amount: 70_000 },
        requiresApproval: true,
      });
      await client.query('COMMIT');
      heldId = message.messageId;
    } finally {
      client.release();
    }
    const { rows } = await db.pool.query<{ payload: { approvalLink: string; onExpiry: string } }>(
      `SELECT payload FROM outbox WHERE topic = 'approvals.requested' AND payload->>'messageId' = $1`,
      [heldId],
    );
    expect(rows[0]!.payload.onExpiry).toBe('reject');
    const link = rows[0]!.payload.approvalLink;
    expect(link.startsWith(`${base}?token=`)).toBe(true);
    expect((await post(link, { decision: 'approve' })).status).toBe(200);
    expect((await stateOf(heldId)).approval_decided_by).toBe('payments-oncall (approval link)');
    expect(() =>
      createOutbox({ approvalRequests: { topic: 'a', links: { url: base, secret: 'short' } } }),
    ).toThrow(/at least 32 characters/);
  });

  it('bad options are refused with what to do', () => {
    expect(() => approvalLink({ messageId: 'nope' }, { url: base, secret })).toThrow(
      OutboxValidationError,
    );
    expect(() =>
      approvalLink(
        { messageId: '0193a3c4-0000-7000-8000-000000000000' },
        { url: base, secret: 'short' },
      ),
    ).toThrow(/at least 32 characters/);
    expect(() => createApprovalHandler({ secrets: [], executor: fromPg(db.pool) })).toThrow(
      /at least one secret/,
    );
    expect(() => approvalLink({ approvalId: 'call-x' }, { url: base, secret })).toThrow(
      /call approval id \(call-<digits>/,
    );
  });

  it('a link for a paused tool call that does not exist is a 404; a token naming both kinds is refused', async () => {
    const link = approvalLink({ approvalId: 'call-999999' }, { url: base, secret });
    expect((await fetch(link)).status).toBe(404);
    const token = new URL(link).searchParams.get('token')!;
    expect(verifyApprovalToken(token, [secret])).toMatchObject({ approvalId: 'call-999999' });
    // A payload with both a message and a call, signed with the right secret: malformed.
    const body = Buffer.from(
      JSON.stringify({
        v: 1,
        m: '0193a3c4-0000-7000-8000-000000000000',
        c: '1',
        exp: Date.now() + 60_000,
      }),
    ).toString('base64url');
    const signature = createHmac('sha256', secret).update(body).digest('base64url');
    expect(() => verifyApprovalToken(`${body}.${signature}`, [secret])).toThrow(/malformed/);
  });
});
