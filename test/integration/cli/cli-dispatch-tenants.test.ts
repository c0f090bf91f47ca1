import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/index.js';
import { dispatchArgs, startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';
import { startWebhookReceiver, type WebhookReceiver } from '../../helpers/webhook-receiver.js';

/**
 * Fair shares between tenants (issue 27) end to end: one `outbox dispatch` process, an HTTP
 * destination, real Postgres. Tenant A commits a burst (`enqueue({ tenantId })`); while A drains,
 * tenant B commits a trickle with plain INSERTs that set the `tenant_id` header. B must not wait
 * behind A's burst: for each of B's messages we count A's deliveries between B's commit and B's
 * delivery. Oldest-first (the claim before tenant shares) puts B behind every A head due before
 * it — about 2,000 here; a tenant share lets it ride along in the next claim or two, behind at most
 * what was already in flight (a claim is 200). Order, not time: nothing here depends on the
 * machine's speed.
 */
let db: TestDatabase;
let receiver: WebhookReceiver;
let dispatcher: CliProcess | undefined;
const A_AGGREGATES = 2_000;
const A_PER_AGGREGATE = 3;
const B_MESSAGES = 20;

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startWebhookReceiver();
});
afterAll(async () => {
  if (dispatcher && dispatcher.child.exitCode === null) dispatcher.child.kill('SIGKILL');
  await receiver?.close();
  await db?.drop();
});

const tenantOf = (i: number) => receiver.envelopes[i]!.headers['tenant_id'];
const countA = () => receiver.envelopes.filter((e) => e.headers['tenant_id'] === 'tenant-a').length;

describe('tenant shares through `outbox dispatch` (issue 27)', () => {
  it("tenant B's trickle is delivered during tenant A's burst, not after it, and every aggregate keeps its order", async () => {
    const burst: OutboxMessage[] = [];
    for (let n = 0; n < A_PER_AGGREGATE; n++)
      for (let a = 0; a < A_AGGREGATES; a++)
        burst.push({
          topic: 'payment.charge',
          aggregateId: `a-${a}`,
          payload: { a, n },
          tenantId: 'tenant-a',
        });
    await enqueueCommitted(db.pool, burst);

    dispatcher = startCli(dispatchArgs(db.url, receiver.url));
    // A's burst is being delivered: now B commits, one message at a time, on two aggregates.
    await expect.poll(() => receiver.envelopes.length, { timeout: 60_000 }).toBeGreaterThan(100);
    const aDeliveredAtCommit = new Map<number, number>();
    for (let n = 0; n < B_MESSAGES; n++) {
      await db.pool.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, headers)
         VALUES ($1, 'mail.send', $2, '{"tenant_id": "tenant-b"}')`,
        [`b-${n % 2}`, JSON.stringify({ n })],
      );
      aDeliveredAtCommit.set(n, countA());
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const total = A_AGGREGATES * A_PER_AGGREGATE + B_MESSAGES;
    await expect.poll(() => receiver.distinct(), { timeout: 120_000 }).toBe(total);
    dispatcher.child.kill('SIGTERM');
    expect(await dispatcher.exited).toBe(0);
    expect(receiver.envelopes).toHaveLength(total);

    // How many of A's deliveries overtook each of B's messages after it was committed.
    const overtaken: number[] = [];
    let aSoFar = 0;
    for (const [i, e] of receiver.envelopes.entries()) {
      if (tenantOf(i) === 'tenant-a') aSoFar++;
      else overtaken.push(aSoFar - aDeliveredAtCommit.get((e.payload as { n: number }).n)!);
    }
    console.log("A deliveries overtaking each of B's:", JSON.stringify(overtaken));
    expect(overtaken).toHaveLength(B_MESSAGES);
    const aLeftWhenBDone = A_AGGREGATES * A_PER_AGGREGATE - aSoFarAt(lastIndexOf('tenant-b'));
    expect(Math.max(...overtaken), JSON.stringify(overtaken)).toBeLessThan(1_000);
    // B finished while A had a good part of its burst still to go.
    expect(aLeftWhenBDone, JSON.stringify(overtaken)).toBeGreaterThan(1_000);

    // Per-aggregate order, for both tenants.
    const last = new Map<string, number>();
    for (const e of receiver.envelopes) {
      expect(e.sequence, e.aggregateId).toBeGreaterThan(last.get(e.aggregateId) ?? 0);
      last.set(e.aggregateId, e.sequence);
    }
    expect(last.size).toBe(A_AGGREGATES + 2);
  }, 180_000);
});

function lastIndexOf(tenant: string): number {
  let found = -1;
  for (let i = 0; i < receiver.envelopes.length; i++) if (tenantOf(i) === tenant) found = i;
  return found;
}

function aSoFarAt(index: number): number {
  let n = 0;
  for (let i = 0; i <= index; i++) if (tenantOf(i) === 'tenant-a') n++;
  return n;
}
