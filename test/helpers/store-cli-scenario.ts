import { expect } from 'vitest';
import type { OutboxMessage } from '../../src/index.js';
import { runCli } from './run-cli.js';
import { startWebhookReceiver } from './webhook-receiver.js';

/** What {@link storeCliScenario} needs of one store. */
export interface StoreCliScenarioOptions {
  /** The database URL the commands take. */
  url: string;
  /** Another spelling of the same URL (`sqlite:` for `file:`, `mariadb:` for `mysql:`). */
  otherUrl: string;
  /** Writes these messages in one business transaction of the store, through its own API. */
  enqueue(messages: OutboxMessage[]): Promise<void>;
}

/**
 * The operator's path on a store other than Postgres, through the CLI as a user types it:
 * migrate (twice: the second has nothing to do), dispatch with a failing destination, status,
 * dead list, replay, dispatch again (order kept), prune, and a Postgres-only command refused.
 */
export async function storeCliScenario(options: StoreCliScenarioOptions): Promise<void> {
  const { url, otherUrl } = options;
  let failing = true;
  // Refuses the charge of order 2 while `failing`.
  const receiver = await startWebhookReceiver({
    status: (envelope) =>
      failing && envelope.aggregateId === 'order:2' && envelope.topic === 'payment.charge'
        ? 500
        : 200,
  });
  try {
    const migrated = await runCli(['migrate', '--database-url', url]);
    expect(migrated.stdout).toContain('applying 001 initial');
    expect(migrated.code).toBe(0);
    const again = await runCli(['migrate', '--database-url', otherUrl]);
    expect(again.stdout).toContain('nothing to do');

    await options.enqueue(
      ['1', '2'].flatMap((id) => [
        { topic: 'payment.charge', aggregateId: `order:${id}`, payload: { id } },
        { topic: 'mail.send', aggregateId: `order:${id}`, payload: { id } },
      ]),
    );

    const dispatch = ['dispatch', '--database-url', url, '--publisher', receiver.url, '--once'];
    const first = await runCli([...dispatch, '--max-attempts', '1']);
    expect(first.code, first.stderr).toBe(1); // drained with a failure
    expect(receiver.distinct()).toBe(2); // order 1; order 2's charge failed, its mail waits

    const status = await runCli(['status', '--json', '--database-url', otherUrl]);
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
  } finally {
    await receiver.close();
  }
}
