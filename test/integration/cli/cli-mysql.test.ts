import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMysqlOutbox } from '../../../src/stores/mysql/index.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../helpers/mysql-database.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

const up = await requireMysql();

describe.runIf(up)('outbox on MariaDB (mysql:// and mariadb:// URLs)', () => {
  let db: MysqlTestDatabase;
  let receiver: WebhookReceiver;
  let failing = true;
  beforeAll(async () => {
    db = await createMysqlTestDatabase({ migrated: false });
    // Refuses the charge of order 2 while `failing`.
    receiver = await startWebhookReceiver({
      status: (envelope) =>
        failing && envelope.aggregateId === 'order:2' && envelope.topic === 'payment.charge'
          ? 500
          : 200,
    });
  });
  afterAll(async () => {
    await receiver.close();
    await db.drop();
  });

  it('migrates, dispatches, shows status and dead letters, replays, prunes', async () => {
    const url = db.url;
    const migrated = await runCli(['migrate', '--database-url', url]);
    expect(migrated.stdout).toContain('applying 001 initial');
    expect(migrated.code).toBe(0);
    const again = await runCli(['migrate', '--database-url', url.replace('mysql:', 'mariadb:')]);
    expect(again.stdout).toContain('nothing to do');

    const connection = await db.connect();
    try {
      await connection.beginTransaction();
      for (const id of ['1', '2'])
        await createMysqlOutbox().enqueue(connection, [
          { topic: 'payment.charge', aggregateId: `order:${id}`, payload: { id } },
          { topic: 'mail.send', aggregateId: `order:${id}`, payload: { id } },
        ]);
      await connection.commit();
    } finally {
      await connection.end();
    }

    const dispatch = [
      'dispatch',
      '--database-url',
      url,
      '--publisher',
      receiver.url,
      '--once',
      '--max-attempts',
      '1',
    ];
    const first = await runCli(dispatch);
    expect(first.code, first.stderr).toBe(1); // drained with a failure
    expect(receiver.distinct()).toBe(2); // order 1; order 2's charge failed, its mail waits

    const status = await runCli(['status', '--json', '--database-url', url]);
    expect(JSON.parse(status.stdout)).toMatchObject({ backlog: 1, deadLetters: 1 });
    const dead = JSON.parse(
      (await runCli(['dead', 'list', '--json', '--database-url', url])).stdout,
    );
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({ aggregateId: 'order:2', topic: 'payment.charge', attempts: 1 });

    failing = false;
    const replay = await runCli(['replay', dead[0].messageId, '--database-url', url]);
    expect(replay.stdout).toContain('replayed 1 message(s)');
    expect((await runCli(dispatch)).code).toBe(0);
    expect(receiver.distinct()).toBe(4);
    const order2 = receiver.envelopes
      .filter((e) => e.aggregateId === 'order:2')
      .map((e) => e.topic);
    expect(order2).toEqual(['payment.charge', 'mail.send']);

    // Everything was dispatched just now: nothing is older than a day, all of it older than 0 s.
    const keep = await runCli(['prune', '--older-than', '1d', '--json', '--database-url', url]);
    expect(JSON.parse(keep.stdout)).toEqual({ deleted: 0 });
    const prune = await runCli(['prune', '--older-than', '0s', '--json', '--database-url', url]);
    expect(JSON.parse(prune.stdout)).toEqual({ deleted: 4 });

    const limits = await runCli(['limits', '--database-url', url]);
    expect(limits.code).toBe(2);
    expect(limits.stderr).toContain('needs Postgres');
  }, 120_000);

  it('refuses to dispatch on a database that was never migrated', async () => {
    const empty = await createMysqlTestDatabase({ migrated: false });
    try {
      const run = await runCli([
        'dispatch',
        '--database-url',
        empty.url,
        '--publisher',
        'memory:',
        '--once',
      ]);
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain('outbox migrate');
    } finally {
      await empty.drop();
    }
  });
});
