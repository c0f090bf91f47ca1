import { randomBytes } from 'node:crypto';
import mysql from 'mysql2/promise';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createConsumer,
  type Handler,
  type TransactionalContext,
} from '../../../../src/consumer/index.js';
import {
  createMysqlLedger,
  createMysqlLedgerTables,
} from '../../../../src/stores/mysql/mysql-ledger.js';
import { makeEnvelope } from '../../../fixtures/consumer/envelopes.js';

/**
 * The consumer ledger on MariaDB (127.0.0.1:3306, root, no password): a database of its own per
 * test, dropped after. Skipped with the reason printed when the server is not there; under
 * CI=true that is a failure instead.
 */
const server = { host: '127.0.0.1', port: 3306, user: 'root' };
const down = await mysql
  .createConnection(server)
  .then((connection) => connection.end())
  .then(
    () => undefined,
    (error: Error) => error.message,
  );
if (down) {
  const reason = `MariaDB at 127.0.0.1:3306 is not reachable (${down}); start it with \`start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd\``;
  if (process.env.CI === 'true') throw new Error(`mysql-ledger.test.ts: ${reason}`);
  console.warn(`[mysql-ledger] skipped: ${reason}`);
}

let database: string;
let pool: mysql.Pool;
beforeEach(async () => {
  if (down) return;
  database = `ao_ledger_${randomBytes(6).toString('hex')}`;
  const admin = await mysql.createConnection(server);
  await admin.query(`CREATE DATABASE ${database}`);
  await admin.end();
  pool = mysql.createPool({ ...server, database, connectionLimit: 6 });
  await createMysqlLedgerTables(pool);
  await createMysqlLedgerTables(pool); // idempotent
  await pool.query(
    'CREATE TABLE charges (message_id VARCHAR(64) NOT NULL, amount INT NOT NULL) ENGINE = InnoDB',
  );
});
afterEach(async () => {
  if (down) return;
  await pool.end();
  const admin = await mysql.createConnection(server);
  await admin.query(`DROP DATABASE IF EXISTS ${database}`);
  await admin.end();
});

const charge: Handler<TransactionalContext> = async (message, { tx }) => {
  await tx.query('INSERT INTO charges (message_id, amount) VALUES (?, ?)', [
    message.id,
    (message.payload as { amount: number }).amount,
  ]);
};
async function charges(messageId: string): Promise<number> {
  const [rows] = await pool.query('SELECT count(*) AS n FROM charges WHERE message_id = ?', [
    messageId,
  ]);
  return Number((rows as { n: number }[])[0]!.n);
}
async function ledgerRows(consumer: string, messageId: string) {
  const [rows] = await pool.query(
    'SELECT state FROM processed_messages WHERE consumer = ? AND message_id = ?',
    [consumer, messageId],
  );
  return rows;
}

describe.skipIf(down !== undefined)('the MySQL/MariaDB consumer ledger, transactional', () => {
  it('performs the effect once and acks a duplicate delivery without calling the handler', async () => {
    let calls = 0;
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger: createMysqlLedger(pool),
      handler: async (message, context) => {
        calls += 1;
        await charge(message, context);
      },
    });
    const envelope = makeEnvelope();
    expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'processed' });
    expect(await consumer.handle(envelope)).toMatchObject({ action: 'ack', reason: 'duplicate' });
    expect(calls).toBe(1);
    expect(await charges(envelope.id)).toBe(1);
    expect(await ledgerRows('billing', envelope.id)).toEqual([{ state: 'done' }]);
  });

  it('a failing handler leaves no ledger row and no effect; the redelivery performs it', async () => {
    let fail = true;
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger: createMysqlLedger(pool),
      handler: async (message, context) => {
        // The effect through mysql2 itself (trx), in the same transaction.
        await context.trx.query('INSERT INTO charges (message_id, amount) VALUES (?, ?)', [
          message.id,
          1200,
        ]);
        if (fail) throw new Error('downstream write failed after the effect');
      },
    });
    const envelope = makeEnvelope();
    expect(await consumer.handle(envelope, { attempt: 1 })).toMatchObject({
      action: 'retry',
      reason: 'handler-failed',
    });
    expect(await ledgerRows('billing', envelope.id)).toEqual([]);
    expect(await charges(envelope.id)).toBe(0);
    fail = false;
    expect((await consumer.handle(envelope, { attempt: 2 })).reason).toBe('processed');
    expect(await charges(envelope.id)).toBe(1);
  });

  it('concurrent deliveries of one message on several connections: one effect', async () => {
    const consumer = createConsumer({
      name: 'billing',
      mode: 'transactional',
      ledger: createMysqlLedger(pool),
      handler: async (message, context) => {
        await charge(message, context);
        await context.tx.query('DO SLEEP(0.05)');
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
    expect(await charges(envelope.id)).toBe(1);
  });

  it('keeps each aggregate in order: an early message waits, the position moves forward', async () => {
    const ledger = createMysqlLedger(pool);
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
    expect(await charges(second.id)).toBe(0);
    expect((await consumer.handle(first)).reason).toBe('processed');
    expect((await consumer.handle(second)).reason).toBe('processed');
    expect(await ledger.position('billing', 'order:1')).toBe(2);
  });
});

describe.skipIf(down !== undefined)('the MySQL/MariaDB consumer ledger, claim-first', () => {
  it('runs the effect once with the message id as idempotency key; a failure leaves nothing', async () => {
    const ledger = createMysqlLedger(pool);
    const keys: string[] = [];
    let fail = true;
    const consumer = createConsumer({
      name: 'mailer',
      mode: 'claim-first',
      ledger,
      handler: async (_message, { idempotencyKey }) => {
        if (fail) throw new Error('the mail API is down');
        keys.push(idempotencyKey);
      },
    });
    const envelope = makeEnvelope();
    expect((await consumer.handle(envelope)).reason).toBe('handler-failed');
    expect(await ledger.state('mailer', envelope.id)).toBeUndefined();
    fail = false;
    expect((await consumer.handle(envelope)).reason).toBe('processed');
    expect((await consumer.handle(envelope)).reason).toBe('duplicate');
    expect(keys).toEqual([envelope.id]);
    expect(await ledger.state('mailer', envelope.id)).toBe('done');
  });

  it('one of concurrent first claims wins; a live claim is held, an ended one taken over, the old holder fenced', async () => {
    const ledger = createMysqlLedger(pool);
    const claims = await Promise.all(
      Array.from({ length: 6 }, () => ledger.claim('mailer', 'm-1', 60_000)),
    );
    expect(claims.filter((c) => c.status === 'acquired')).toHaveLength(1);
    expect(claims.filter((c) => c.status === 'held')).toHaveLength(5);

    const first = await ledger.claim('mailer', 'm-2', 1);
    expect(first).toMatchObject({ status: 'acquired', takeover: false });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const second = await ledger.claim('mailer', 'm-2', 60_000);
    expect(second).toMatchObject({ status: 'acquired', takeover: true });
    if (first.status !== 'acquired' || second.status !== 'acquired') throw new Error('unreachable');
    expect(await ledger.renew('mailer', 'm-2', first.token, 60_000)).toBeUndefined();
    await ledger.release('mailer', 'm-2', first.token);
    expect(await ledger.state('mailer', 'm-2')).toBe('claimed');
    const renewed = await ledger.renew('mailer', 'm-2', second.token, 120_000);
    expect(renewed! > second.token).toBe(true);
    await ledger.complete('mailer', 'm-2', { aggregateId: 'order:1', sequence: 3 });
    expect(await ledger.position('mailer', 'order:1')).toBe(3);
    expect(await ledger.claim('mailer', 'm-2', 60_000)).toEqual({ status: 'done' });
  });
});
