import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createOutbox, fromPg, type OutboxMessage } from '../../../src/index.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * `outbox engine` as an operator moves a schema to the lanes engine, and the commands that follow
 * the record when they are not given `--engine` (migration 036).
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

const enqueue = (writer: ReturnType<typeof createOutbox>, message: OutboxMessage) =>
  inTransaction(db.pool, (c) => writer.enqueue(fromPg(c), message));
const engine = (...args: string[]) => runCli(['engine', '--database-url', db.url, ...args]);
const dispatchOnce = (...args: string[]) =>
  runCli(['dispatch', '--database-url', db.url, '--publisher', receiver.url, '--once', ...args]);

describe('outbox engine', () => {
  it('explains itself and refuses a name it does not know (exit 2)', async () => {
    const help = await runCli(['engine', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: outbox engine [claims|lanes]');
    const bad = await engine('queues');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('the engine is claims or lanes, got "queues"');
    const force = await engine('lanes', '--force');
    expect(force.code).toBe(2);
    expect(force.stderr).toContain('--force only applies to `outbox engine claims`');
  });

  it('moves a schema to lanes: writers and commands without an engine follow it', async () => {
    expect((await engine()).stdout).toBe('claims\n');
    const claimed = await enqueue(createOutbox(), {
      topic: 'mail.send',
      aggregateId: 'user:1',
      payload: { n: 1 },
    });

    const moved = await engine('lanes');
    expect(moved.code, moved.stderr).toBe(0);
    expect(moved.stdout).toContain('records lanes (was claims)');
    expect(moved.stdout).toContain('the claim engine still holds 1 unpublished message(s)');
    expect(JSON.parse((await engine('--json')).stdout)).toEqual({ engine: 'lanes' });

    // A writer without an engine, made now, writes the lanes tables.
    const laned = await enqueue(createOutbox(), {
      topic: 'mail.send',
      aggregateId: 'user:2',
      payload: { n: 2 },
    });
    const lanesRows = await db.pool.query('SELECT count(*)::int AS n FROM outbox_lane_messages');
    expect(lanesRows.rows[0].n).toBe(1);

    const status = await runCli(['status', '--database-url', db.url, '--json']);
    expect(status.code, status.stderr).toBe(0);
    const lanesStatus = JSON.parse(status.stdout) as {
      backlog: number;
      backlogEstimated?: boolean;
    };
    expect(lanesStatus).toMatchObject({ backlog: 1, backlogEstimated: false });

    // `dispatch` without --engine runs the lanes dispatcher, refusing its flags as --engine lanes does.
    const refused = await dispatchOnce('--async-settle');
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/no separate claim or settle commit/);
    const lanesRun = await dispatchOnce();
    expect(lanesRun.code, lanesRun.stderr).toBe(0);
    expect(`${lanesRun.stdout}${lanesRun.stderr}`).toContain(
      'the claim engine still holds 1 unpublished message(s)',
    );
    expect(receiver.events.map((e) => e.messageId)).toEqual([laned.messageId]);

    // The claim engine's dispatcher, asked for by name, warns that the record says otherwise.
    const claimsRun = await dispatchOnce('--engine', 'claims');
    expect(claimsRun.code, claimsRun.stderr).toBe(0);
    expect(`${claimsRun.stdout}${claimsRun.stderr}`).toContain(
      'records the lanes engine (outbox engine): writers without an engine option write its tables',
    );
    expect(receiver.events.map((e) => e.messageId)).toEqual([laned.messageId, claimed.messageId]);
  });

  it('refuses to move back to claims while lanes messages wait (exit 1), unless --force', async () => {
    await enqueue(createOutbox({ engine: 'lanes' }), {
      topic: 'mail.send',
      aggregateId: 'user:3',
      payload: { n: 3 },
    });
    const refused = await engine('claims');
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      'the lanes engine still holds unpublished messages (backlog 1',
    );
    expect((await engine()).stdout).toBe('lanes\n');
    const forced = await engine('claims', '--force', '--json');
    expect(forced.code, forced.stderr).toBe(0);
    expect(JSON.parse(forced.stdout)).toEqual({
      engine: 'claims',
      previous: 'lanes',
      claimEngineUnpublished: 0,
      changed: true,
    });
  });

  it('outbox migrate records lanes on a new schema, --engine another choice, and refuses a different one on a schema that has one', async () => {
    const plain = await runCli(['migrate', '--database-url', db.url, '--schema', 'fresh_default']);
    expect(plain.code, plain.stderr).toBe(0);
    expect((await engine('--schema', 'fresh_default')).stdout).toBe('lanes\n');
    const migrateFresh = (name: string) =>
      runCli(['migrate', '--database-url', db.url, '--schema', 'fresh_claims', '--engine', name]);
    const fresh = await migrateFresh('claims');
    expect(fresh.code, fresh.stderr).toBe(0);
    expect((await engine('--schema', 'fresh_claims')).stdout).toBe('claims\n');
    const again = await migrateFresh('lanes');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('records the claims engine already');
  });
});
