import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { inTransaction } from '../../helpers/transaction.js';
import { enqueueLanes } from '../../helpers/lanes.js';
import { startCli } from '../../helpers/cli-process.js';
import { runCli } from '../../helpers/run-cli.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * `outbox dispatch --engine lanes`, `outbox dead list --engine lanes` and `outbox replay --engine
 * lanes` as an operator types them, on real Postgres and an HTTP destination.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
let failing = true;

beforeAll(async () => {
  db = await createTestDatabase();
  // Refuses the charge of order 2 while `failing`.
  receiver = await startWebhookReceiver({
    status: (e) =>
      failing && e.aggregateId === 'order:2' && e.topic === 'payment.charge' ? 500 : 200,
  });
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

const write = (messages: readonly OutboxMessage[]) => enqueueLanes(db.pool, messages);

/** Nothing listens here: a command that connected before refusing would exit 1, not 2. */
const NOWHERE = 'postgres://outbox@127.0.0.1:1/nowhere';

describe('outbox dispatch --engine lanes', () => {
  it('lists --engine in its help', async () => {
    const help = await runCli(['dispatch', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('--engine claims|lanes');
  });

  it('refuses, before connecting, the flags the lanes engine does not take, saying why', async () => {
    const base = ['dispatch', '--engine', 'lanes', '--database-url', NOWHERE];
    const publisher = ['--publisher', 'http://127.0.0.1:9/x'];
    for (const [flags, why] of [
      [['--async-settle'], /no separate claim or settle commit/],
      [['--async-claim'], /--async-claim is not available/],
      [['--claim-shape', 'heads-first'], /no claim shape/],
      [['--slot', 'lanes_slot'], /--slot is not available without --mode cdc/],
      [['--mode', 'cdc', '--sweep-interval-ms', '1000'], /no separate sweeper/],
      [['--schemas', 'tenant_*', '--concurrency', '2'], /--concurrency .* in fleet mode/],
    ] as const) {
      const result = await runCli([...base, ...publisher, ...flags]);
      expect(result.code, `${flags.join(' ')}: ${result.stderr}`).toBe(2);
      expect(result.stderr).toMatch(why);
    }
    const bogus = await runCli(['dispatch', '--engine', 'queues', '--database-url', NOWHERE]);
    expect(bogus.code).toBe(2);
    expect(bogus.stderr).toContain('--engine must be claims or lanes');
  });

  it("runs until stopped with --concurrency 2, woken by the lanes writer's NOTIFY, with retention in the same process", async () => {
    // A fallback poll of a minute: only the wake-up can deliver within the poll's timeout.
    const cli = startCli([
      'dispatch',
      '--engine',
      'lanes',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--fallback-poll-ms',
      '60000',
      '--prune-older-than',
      '30d',
      '--prune-archive',
      '--concurrency',
      '2',
    ]);
    try {
      await expect.poll(() => cli.output(), { timeout: 20_000 }).toContain('lanes dispatcher');
      // --concurrency 2: two owners (one process) on eight lanes each.
      const owners = async () =>
        (
          await db.pool.query<{ owner: string; n: string }>(
            `SELECT owner, count(*) AS n FROM outbox_lanes WHERE owner IS NOT NULL GROUP BY owner`,
          )
        ).rows.map((r) => Number(r.n));
      await expect.poll(owners, { timeout: 20_000 }).toEqual([8, 8]);
      await expect.poll(() => cli.output(), { timeout: 20_000 }).toContain('retention run');
      const before = receiver.distinct();
      // Armed when idle: written after the dispatcher found nothing, found by the NOTIFY.
      await new Promise((resolve) => setTimeout(resolve, 500));
      await write([{ topic: 'mail.send', aggregateId: 'woken', payload: {} }]);
      await expect.poll(() => receiver.distinct(), { timeout: 20_000 }).toBe(before + 1);
    } finally {
      cli.child.kill('SIGTERM');
      expect(await cli.exited, cli.output()).toBe(0);
    }
  }, 60_000);

  it('drains with --once, lists the dead letter, replays it by message id, and drains in order', async () => {
    const before = receiver.distinct();
    const written = await write(
      ['1', '2'].flatMap((id) => [
        { topic: 'payment.charge', aggregateId: `order:${id}`, payload: { id } },
        { topic: 'mail.send', aggregateId: `order:${id}`, payload: { id } },
      ]),
    );
    const dispatch = [
      'dispatch',
      '--engine',
      'lanes',
      '--database-url',
      db.url,
      '--publisher',
      receiver.url,
      '--once',
    ];
    // --rate-limit and --route-pause-* are taken (a limit far above what this test sends).
    const first = await runCli([
      ...dispatch,
      '--max-attempts',
      '1',
      '--rate-limit',
      'payment.*=1000/s',
      '--route-pause-after',
      '50',
    ]);
    expect(first.code, first.stderr).toBe(1); // drained with a failure
    expect(first.stdout + first.stderr).toContain('lanes dispatcher');
    expect(receiver.distinct()).toBe(before + 2); // order 1; order 2's charge failed, its mail waits
    const limits = await db.pool.query('SELECT pattern FROM outbox_rate_limits');
    expect(limits.rows).toEqual([{ pattern: 'payment.*' }]);

    // The claim engine's list knows nothing of the lanes.
    const claims = await runCli(['dead', 'list', '--json', '--database-url', db.url]);
    expect(JSON.parse(claims.stdout)).toEqual([]);
    const listed = await runCli([
      'dead',
      'list',
      '--engine',
      'lanes',
      '--json',
      '--database-url',
      db.url,
    ]);
    expect(listed.code, listed.stderr).toBe(0);
    const dead = JSON.parse(listed.stdout);
    expect(dead).toHaveLength(1);
    expect(dead[0]).toMatchObject({
      messageId: written[2]!.messageId,
      aggregateId: 'order:2',
      topic: 'payment.charge',
      attempts: 1,
      payload: { id: '2' },
    });
    expect(dead[0].id).toMatch(/^\d+:\d+$/);

    const byRowId = await runCli([
      'replay',
      '--engine',
      'lanes',
      dead[0].id,
      '--database-url',
      db.url,
    ]);
    expect(byRowId.code).toBe(2);
    expect(byRowId.stderr).toContain('give message ids (UUID)');

    failing = false;
    const replay = await runCli([
      'replay',
      '--engine',
      'lanes',
      dead[0].messageId,
      '--database-url',
      db.url,
    ]);
    expect(replay.stdout, replay.stderr).toContain('replayed 1 message(s)');
    const again = await runCli(dispatch);
    expect(again.code, again.stderr).toBe(0);
    expect(receiver.distinct()).toBe(before + 4);
    const order2 = receiver.envelopes
      .filter((e) => e.aggregateId === 'order:2')
      .map((e) => e.topic);
    expect(order2).toEqual(['payment.charge', 'mail.send']);
  }, 60_000);

  it('warns at its start while the claim engine holds unpublished messages, and not once it holds none', async () => {
    const claims = createOutbox();
    await inTransaction(db.pool, (client) =>
      claims.enqueue(fromPg(client), [
        { topic: 'mail.send', aggregateId: 'switching', payload: { n: 1 } },
        { topic: 'mail.send', aggregateId: 'switching', payload: { n: 2 } },
      ]),
    );
    const dispatch = ['dispatch', '--engine', 'lanes', '--database-url', db.url];
    const run = await runCli([...dispatch, '--publisher', receiver.url, '--once']);
    expect(run.code, run.stderr).toBe(0);
    const said = run.stdout + run.stderr;
    expect(said).toMatch(/the claim engine still holds 2 unpublished message\(s\)/);
    expect(said).toContain('Moving from the claim engine');
    // Published by the claim engine: no warning.
    await db.pool.query(`UPDATE outbox SET dispatched_at = now() WHERE aggregate_id = 'switching'`);
    const quiet = await runCli([...dispatch, '--publisher', receiver.url, '--once']);
    expect(quiet.code, quiet.stderr).toBe(0);
    expect(quiet.stdout + quiet.stderr).not.toContain('claim engine still holds');
  });
});
