import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted, manyMessages, resetOutbox } from '../../helpers/outbox-fixtures.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

let db: TestDatabase;
let receiver: WebhookReceiver;
let failAggregate: string | undefined;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver({
    status: (e) => (e.aggregateId === failAggregate ? 422 : 200),
  });
});
afterAll(async () => {
  await receiver.close();
  await db.drop();
});
beforeEach(async () => {
  failAggregate = undefined;
  await resetOutbox(db.pool);
});

/** `outbox dispatch --once` against this file's database and receiver, plus `flags`. */
const dispatchOnce = (...flags: string[]) =>
  runCli(['dispatch', '--once', '--database-url', db.url, '--publisher', receiver.url, ...flags]);

/**
 * Row triggers on `tables` (AFTER `event`, where `condition` holds) that log the
 * `synchronous_commit` the writing statement ran with, into `<kind>_log`.
 */
async function logCommitSetting(
  kind: string,
  event: 'INSERT' | 'UPDATE',
  tables: string[],
  condition: string,
) {
  await db.pool.query(`
    CREATE TABLE IF NOT EXISTS ${kind}_log (synchronous_commit text NOT NULL);
    TRUNCATE ${kind}_log;
    CREATE OR REPLACE FUNCTION log_${kind}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF ${condition} THEN
        INSERT INTO ${kind}_log VALUES (current_setting('synchronous_commit'));
      END IF;
      RETURN NULL;
    END $$;
    ${tables
      .map(
        (t) => `CREATE OR REPLACE TRIGGER log_${kind} AFTER ${event} ON ${t}
      FOR EACH ROW EXECUTE FUNCTION log_${kind}();`,
      )
      .join('\n')}`);
  return {
    read: async (): Promise<string[]> =>
      (await db.pool.query(`SELECT synchronous_commit AS s FROM ${kind}_log`)).rows.map((r) => r.s),
    clear: async () => {
      await db.pool.query(`TRUNCATE ${kind}_log`);
    },
    drop: async () => {
      for (const t of tables) await db.pool.query(`DROP TRIGGER log_${kind} ON ${t}`);
    },
  };
}

describe('outbox dispatch / status / dead / replay', () => {
  it('dispatch --once drains everything due and exits 0', async () => {
    await enqueueCommitted(db.pool, manyMessages(5, 3));
    const before = receiver.distinct();
    const result = await dispatchOnce();
    expect(result.code, result.stderr).toBe(0);
    expect(receiver.distinct() - before).toBe(15);
    expect(result.stdout).toMatch(/drained published=15/);
    const status = JSON.parse(
      (await runCli(['status', '--json', '--database-url', db.url])).stdout,
    );
    expect(status).toMatchObject({ backlog: 0, deadLetters: 0, inFlight: 0, dueNow: 0 });
  });

  it('a permanent failure dead-letters, --once exits 1, status and dead list show it, replay brings it back', async () => {
    failAggregate = 'agg-0';
    await enqueueCommitted(db.pool, manyMessages(2, 1));
    const run = await dispatchOnce();
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/dead-lettered/);

    const status = JSON.parse(
      (await runCli(['status', '--json', '--database-url', db.url])).stdout,
    );
    expect(status.deadLetters).toBe(1);
    expect(status.lastErrors[0]).toMatchObject({ aggregateId: 'agg-0', dead: true });
    expect(status.lastErrors[0].lastError).toMatch(/permanent: .*422/);
    const human = await runCli(['status', '--database-url', db.url]);
    expect(human.stdout).toMatch(/dead letters\s+1/);

    const dead = JSON.parse(
      (await runCli(['dead', 'list', '--json', '--database-url', db.url])).stdout,
    );
    expect(dead).toHaveLength(1);

    failAggregate = undefined;
    const replay = await runCli(['replay', dead[0].messageId, '--database-url', db.url]);
    expect(replay.code, replay.stderr).toBe(0);
    expect(replay.stdout).toMatch(/replayed 1/);
    const again = await dispatchOnce();
    expect(again.code).toBe(0);
    expect(
      JSON.parse((await runCli(['status', '--json', '--database-url', db.url])).stdout),
    ).toMatchObject({ backlog: 0, deadLetters: 0 });
    // Nothing left to replay: exit 1 and say so.
    const none = await runCli(['replay', '--all-dead', '--database-url', db.url]);
    expect(none.code).toBe(1);
  });

  it('rejects bad flags with exit 2 before doing anything', async () => {
    const noPublisher = await runCli(['dispatch', '--database-url', db.url]);
    expect(noPublisher.code).toBe(2);
    expect(noPublisher.stderr).toMatch(/--publisher URL or --config FILE is required/);
    const badBatch = await runCli([
      'dispatch',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--batch-size',
      '0',
    ]);
    expect(badBatch.code).toBe(2);
    expect(badBatch.stderr).toMatch(/--batch-size must be a positive integer/);
    expect((await runCli(['replay', '--database-url', db.url])).code).toBe(2);
    expect((await runCli(['dispatch', '--help'])).stdout).toMatch(/--unordered GLOB/);
  });

  it('dispatch --async-settle settles without waiting for the WAL flush; by default settles wait', async () => {
    // Records, from inside each settle (it moves the published rows into the dispatched ring,
    // migrations 018 and 021: an INSERT into the current slot's batch table), the
    // synchronous_commit it ran with.
    const ring = [0, 1, 2].map((k) => `outbox_dispatched_batch_${k}`);
    const log = await logCommitSetting('settle', 'INSERT', ring, 'NEW.dispatched_at IS NOT NULL');
    try {
      await enqueueCommitted(db.pool, manyMessages(2, 1));
      expect((await dispatchOnce()).code).toBe(0);
      // One batch row per settle (however the two messages were batched), each logged.
      const sync = await log.read();
      expect(sync.length).toBeGreaterThan(0);
      expect(new Set(sync)).toEqual(new Set(['on']));
      await log.clear();
      await enqueueCommitted(db.pool, manyMessages(2, 1));
      expect((await dispatchOnce('--async-settle')).code).toBe(0);
      const async = await log.read();
      expect(async.length).toBeGreaterThan(0);
      expect(new Set(async)).toEqual(new Set(['off']));
      expect((await runCli(['dispatch', '--help'])).stdout).toMatch(/--async-settle/);
    } finally {
      await log.drop();
    }
  });

  it('dispatch --async-claim claims without waiting for the WAL flush; by default claims wait', async () => {
    // Records, from inside each claim (its UPDATE leases rows), the synchronous_commit it ran with.
    const log = await logCommitSetting(
      'claim',
      'UPDATE',
      ['outbox'],
      'NEW.lease_owner IS NOT NULL',
    );
    try {
      await enqueueCommitted(db.pool, manyMessages(2, 1));
      expect((await dispatchOnce()).code).toBe(0);
      expect(new Set(await log.read())).toEqual(new Set(['on']));
      await log.clear();
      await enqueueCommitted(db.pool, manyMessages(2, 1));
      // A lease of 1 s: the guard after Postgres's last crash recovery (or first start) is over.
      expect((await dispatchOnce('--async-claim', '--lease-ms', '1000')).code).toBe(0);
      expect(new Set(await log.read())).toEqual(new Set(['off']));
      expect((await runCli(['dispatch', '--help'])).stdout).toMatch(/--async-claim/);
    } finally {
      await log.drop();
    }
  });

  it('dispatch refuses an unmigrated schema with the command to run', async () => {
    const result = await runCli([
      'dispatch',
      '--once',
      '--database-url',
      db.url,
      '--schema',
      'nowhere',
      '--publisher',
      receiver.url,
    ]);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/outbox migrate --schema nowhere/);
  });

  it('--config routes topics to different publishers; a bad config is a usage error', async () => {
    const mail = await startWebhookReceiver();
    try {
      const dir = mkdtempSync(join(tmpdir(), 'outbox-config-'));
      const config = join(dir, 'outbox.json');
      writeFileSync(
        config,
        JSON.stringify({
          routes: [{ pattern: 'mail.*', publisher: mail.url }],
          fallback: receiver.url,
        }),
      );
      await enqueueCommitted(db.pool, [
        { topic: 'mail.send', aggregateId: 'r1', payload: 1 },
        { topic: 'payment.charge', aggregateId: 'r2', payload: 2 },
      ]);
      const before = receiver.envelopes.length;
      const result = await runCli([
        'dispatch',
        '--once',
        '--database-url',
        db.url,
        '--config',
        config,
      ]);
      expect(result.code, result.stderr).toBe(0);
      expect(mail.envelopes.map((e) => e.topic)).toEqual(['mail.send']);
      expect(receiver.envelopes.slice(before).map((e) => e.topic)).toEqual(['payment.charge']);

      writeFileSync(config, JSON.stringify({ routes: [{ pattern: 'mail.*' }] }));
      const bad = await runCli([
        'dispatch',
        '--once',
        '--database-url',
        db.url,
        '--config',
        config,
      ]);
      expect(bad.code).toBe(2);
      const both = await runCli([
        'dispatch',
        '--database-url',
        db.url,
        '--config',
        config,
        '--publisher',
        receiver.url,
      ]);
      expect(both.code).toBe(2);
    } finally {
      await mail.close();
    }
  });
});
