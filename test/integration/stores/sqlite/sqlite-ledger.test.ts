import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createConsumer,
  type Handler,
  type TransactionalContext,
} from '../../../../src/consumer/index.js';
import {
  createSqliteLedger,
  migrateSqlite,
  openSqlite,
  type SqliteDatabase,
} from '../../../../src/stores/sqlite/index.js';
import { makeEnvelope } from '../../../fixtures/consumer/envelopes.js';

let dir: string;
let db: SqliteDatabase;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-outbox-sqlite-ledger-'));
  db = await openSqlite(join(dir, 'agent.db'));
  migrateSqlite(db);
  db.exec('CREATE TABLE charges (message_id TEXT NOT NULL, amount INTEGER NOT NULL)');
});
afterEach(async () => {
  db.close();
  await rm(dir, { recursive: true, force: true });
});

const charge: Handler<TransactionalContext> = async (message, { tx }) => {
  await tx.query('INSERT INTO charges (message_id, amount) VALUES (?, ?)', [
    message.id,
    (message.payload as { amount: number }).amount,
  ]);
};
const charges = (messageId: string) =>
  (
    db.prepare('SELECT count(*) AS n FROM charges WHERE message_id = ?').get(messageId) as {
      n: number;
    }
  ).n;
const ledgerRows = (consumer: string, messageId: string) =>
  db
    .prepare('SELECT state FROM processed_messages WHERE consumer = ? AND message_id = ?')
    .all(consumer, messageId);

describe('the SQLite consumer ledger, transactional', () => {
  it('performs the effect once and acks a duplicate delivery without calling the handler', async () => {
    let calls = 0;
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger: createSqliteLedger(db),
      handler: async (message, context) => {
        calls += 1;
        await charge(message, context);
      },
    });
    const envelope = makeEnvelope();
    expect(await consumer.handle(JSON.stringify(envelope))).toMatchObject({
      action: 'ack',
      reason: 'processed',
      messageId: envelope.id,
    });
    expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'duplicate' });
    expect(calls).toBe(1);
    expect(charges(envelope.id)).toBe(1);
    expect(ledgerRows('billing', envelope.id)).toEqual([{ state: 'done' }]);
  });

  it('a failing handler leaves no ledger row and no effect; the redelivery performs it', async () => {
    let fail = true;
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger: createSqliteLedger(db),
      handler: async (message, context) => {
        // The effect through better-sqlite3 itself (trx), in the same transaction.
        context.trx
          .prepare('INSERT INTO charges (message_id, amount) VALUES (?, ?)')
          .run(message.id, 1200);
        if (fail) throw new Error('downstream write failed after the effect');
      },
    });
    const envelope = makeEnvelope();
    expect(await consumer.handle(envelope, { attempt: 1 })).toMatchObject({
      action: 'retry',
      reason: 'handler-failed',
    });
    expect(ledgerRows('billing', envelope.id)).toEqual([]);
    expect(charges(envelope.id)).toBe(0);
    expect(db.inTransaction).toBe(false);
    fail = false;
    expect((await consumer.handle(envelope, { attempt: 2 })).reason).toBe('processed');
    expect(charges(envelope.id)).toBe(1);
  });

  it('concurrent deliveries of one message in one process: one effect', async () => {
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger: createSqliteLedger(db),
      handler: async (message, context) => {
        await charge(message, context);
        await new Promise((resolve) => setTimeout(resolve, 20));
      },
    });
    const envelope = makeEnvelope();
    const results = await Promise.all(Array.from({ length: 5 }, () => consumer.handle(envelope)));
    expect(results.map((r) => r.reason).sort()).toEqual([
      'duplicate',
      'duplicate',
      'duplicate',
      'duplicate',
      'processed',
    ]);
    expect(charges(envelope.id)).toBe(1);
  });

  it('keeps each aggregate in order: an early message waits, a stale one is acked without effect', async () => {
    const ledger = createSqliteLedger(db);
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger,
      ordering: { topics: ['payment.charge'], check: 'strict' },
      handler: charge,
    });
    const first = makeEnvelope({ aggregateId: 'order:1', sequence: 1 });
    const second = makeEnvelope({ aggregateId: 'order:1', sequence: 2 });
    expect((await consumer.handle(second)).action).toBe('retry');
    expect(charges(second.id)).toBe(0);
    expect((await consumer.handle(first)).reason).toBe('processed');
    expect((await consumer.handle(second)).reason).toBe('processed');
    expect(await ledger.position('billing', 'order:1')).toBe(2);
    expect(
      (await consumer.handle(makeEnvelope({ aggregateId: 'order:1', sequence: 1 }))).action,
    ).toBe('ack');
  });
});

describe('the SQLite consumer ledger, claim-first', () => {
  it('runs the effect once with the message id as idempotency key, and records done', async () => {
    const keys: string[] = [];
    const ledger = createSqliteLedger(db);
    const consumer = createConsumer({
      name: 'mailer',
      mode: 'claim-first',
      ledger,
      handler: async (_message, { idempotencyKey }) => {
        keys.push(idempotencyKey);
      },
    });
    const envelope = makeEnvelope();
    expect((await consumer.handle(envelope)).reason).toBe('processed');
    expect((await consumer.handle(envelope)).reason).toBe('duplicate');
    expect(keys).toEqual([envelope.id]);
    expect(await ledger.state('mailer', envelope.id)).toBe('done');
  });

  it('a failed handler leaves nothing behind; the next delivery runs it', async () => {
    const ledger = createSqliteLedger(db);
    let fail = true;
    const consumer = createConsumer({
      name: 'mailer',
      mode: 'claim-first',
      ledger,
      handler: async () => {
        if (fail) throw new Error('the mail API is down');
      },
    });
    const envelope = makeEnvelope();
    expect((await consumer.handle(envelope)).reason).toBe('handler-failed');
    expect(await ledger.state('mailer', envelope.id)).toBeUndefined();
    fail = false;
    expect((await consumer.handle(envelope)).reason).toBe('processed');
  });

  it('holds a live claim, takes over an expired one, and fences the old holder', async () => {
    let clock = 1_000_000;
    const ledger = createSqliteLedger(db, { now: () => clock });
    const first = await ledger.claim('mailer', 'm-1', 10_000);
    expect(first).toMatchObject({ status: 'acquired', takeover: false });
    expect(await ledger.claim('mailer', 'm-1', 10_000)).toEqual({
      status: 'held',
      remainingMs: 10_000,
    });
    clock += 10_001;
    const second = await ledger.claim('mailer', 'm-1', 10_000);
    expect(second).toMatchObject({ status: 'acquired', takeover: true });
    if (first.status !== 'acquired' || second.status !== 'acquired') throw new Error('unreachable');
    // The crashed holder came back: its renew and release match nothing.
    expect(await ledger.renew('mailer', 'm-1', first.token, 10_000)).toBeUndefined();
    await ledger.release('mailer', 'm-1', first.token);
    expect(await ledger.state('mailer', 'm-1')).toBe('claimed');
    const renewed = await ledger.renew('mailer', 'm-1', second.token, 20_000);
    expect(Number(renewed)).toBe(clock + 20_000);
    await ledger.complete('mailer', 'm-1', { aggregateId: 'order:1', sequence: 3 });
    expect(await ledger.state('mailer', 'm-1')).toBe('done');
    expect(await ledger.position('mailer', 'order:1')).toBe(3);
    expect(await ledger.claim('mailer', 'm-1', 10_000)).toEqual({ status: 'done' });
  });
});
