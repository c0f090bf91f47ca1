import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import pg from 'pg';
import {
  createOutbox,
  fromPg,
  type EnqueuedMessage,
  type OutgoingMessage,
  type PublishOutcome,
  type Publisher,
} from '../../../src/index.js';
import { setDatabaseEngine } from '../../../src/admin/database-engine.js';
import { createFleetDispatcher, type FleetDispatcher } from '../../../src/fleet/index.js';
import { commitWithSequences, tenantFamily } from '../../helpers/tenant-databases.js';

/**
 * The lanes engine's fleet in one process (createFleetDispatcher({ engine: 'lanes' })): what the
 * CLI test (test/integration/cli/cli-dispatch-fleet-lanes.test.ts) cannot time — a turn ending
 * while another tenant waits, a retry due with no write to announce it — and the per-tenant
 * status and retention of the lanes tables.
 */
const family = tenantFamily();

/** Records every published message id with its time; `fail` decides a message's first outcome. */
function recordingPublisher(options: {
  callMs: number;
  fail?: (m: OutgoingMessage) => PublishOutcome | undefined;
}): Publisher & { published: Map<string, number> } {
  const published = new Map<string, number>();
  const seen = new Set<string>();
  return {
    published,
    async publish(messages) {
      await new Promise((r) => setTimeout(r, options.callMs));
      return messages.map((m) => {
        const failed = seen.has(m.id) ? undefined : options.fail?.(m);
        seen.add(m.id);
        if (failed) return failed;
        if (!published.has(m.id)) published.set(m.id, Date.now());
        return { status: 'published' };
      });
    },
  };
}

function lanesFleet(
  publisher: Publisher,
  extra: Partial<Parameters<typeof createFleetDispatcher>[0]>,
) {
  return createFleetDispatcher({
    engine: 'lanes',
    servers: [inject('adminDatabaseUrl')],
    databases: family.glob,
    publisher,
    maxConnections: 2, // the control connection and one tenant at a time
    leaseMs: 5_000,
    pollIntervalMs: 50,
    warmMs: 0,
    idlePollMs: 60_000,
    ...extra,
  });
}

describe('fleet dispatcher on the lanes engine (one process)', () => {
  let fleet: FleetDispatcher | undefined;
  beforeAll(async () => {
    for (let n = 0; n < 2; n++) await family.create(n);
  });
  afterAll(async () => {
    await fleet?.stop();
    await family.dropAll();
  });

  it('ends a long turn for a tenant that waits, then finishes the first; status and retention read the lanes tables', async () => {
    const publisher = recordingPublisher({ callMs: 2 });
    fleet = lanesFleet(publisher, {
      batchSize: 50,
      turnMs: 300,
      statusIntervalMs: 1,
      retention: { olderThanMs: 1, intervalMs: 1 },
    });
    const statuses: Record<string, unknown>[] = [];
    fleet.on('fleet:target:status', ({ status }) => statuses.push({ ...status }));
    let pruned = 0;
    fleet.on('fleet:retention:run', ({ removed }) => (pruned += removed));
    await fleet.start();
    // A backlog of 6,000 in tenant 0: about 3 s of publishing at 2 ms a call, four aggregates.
    const big = await commitWithSequences(
      family.url(family.name(0)),
      Array.from({ length: 6_000 }, (_, i) => ({
        topic: 'payment.charge',
        aggregateId: `a${i % 4}`,
        payload: { i },
      })),
      { engine: 'lanes' },
    );
    await expect.poll(() => publisher.published.size, { timeout: 10_000 }).toBeGreaterThan(0);
    const [one] = await commitWithSequences(
      family.url(family.name(1)),
      [{ topic: 'order.placed', aggregateId: 'o', payload: {} }],
      { engine: 'lanes' },
    );
    await expect
      .poll(() => publisher.published.has(one!.messageId), { timeout: 10_000 })
      .toBe(true);
    const bigDoneBefore = big.filter(
      (m) =>
        (publisher.published.get(m.messageId) ?? Infinity) <
        publisher.published.get(one!.messageId)!,
    ).length;
    // Tenant 1 was served while tenant 0 still had most of its backlog: its turn was ended.
    expect(bigDoneBefore).toBeLessThan(big.length);
    await expect
      .poll(() => big.every((m) => publisher.published.has(m.messageId)), { timeout: 30_000 })
      .toBe(true);
    // Per tenant, the lanes engine's status (readLaneEngineStatus: it has backlogEstimated).
    expect(statuses.some((s) => 'backlogEstimated' in s)).toBe(true);
    // The lanes prune ran in the tenant while it was connected (consumed lane messages removed).
    await expect.poll(() => pruned, { timeout: 20_000 }).toBeGreaterThan(0);
  }, 60_000);

  it('comes back for a parked retry when it is due, with no write to announce it', async () => {
    await fleet?.stop();
    let failedAt = 0;
    const publisher = recordingPublisher({
      callMs: 0,
      fail: (m) => {
        if (m.topic !== 'flaky') return undefined;
        failedAt = Date.now();
        return { status: 'retryable', error: 'try later' };
      },
    });
    // A failure's retry, 1.5 s later (a Retry-After would pause the route instead: a deferral).
    fleet = lanesFleet(publisher, { backoff: { baseMs: 1_500, maxMs: 1_500, jitterMs: 0 } });
    await fleet.start();
    const [flaky] = await commitWithSequences(
      family.url(family.name(1)),
      [{ topic: 'flaky', aggregateId: 'f', payload: {} }],
      { engine: 'lanes' },
    );
    // The idle poll is a minute away: only the next-due read (the parked head's due time) can
    // bring the tenant back within the timeout.
    await expect
      .poll(() => publisher.published.has(flaky!.messageId), { timeout: 15_000 })
      .toBe(true);
    expect(failedAt).toBeGreaterThan(0);
    expect(publisher.published.get(flaky!.messageId)! - failedAt).toBeGreaterThanOrEqual(1_400);
  }, 30_000);

  it('comes back for a delayed message when it is due (parked by the turn that read it early)', async () => {
    await fleet?.stop();
    const publisher = recordingPublisher({ callMs: 0 });
    fleet = lanesFleet(publisher, {});
    await fleet.start();
    const client = new pg.Client({ connectionString: family.url(family.name(0)) });
    await client.connect();
    let written: EnqueuedMessage;
    try {
      await client.query('BEGIN');
      written = await createOutbox({ engine: 'lanes' }).enqueue(fromPg(client), {
        topic: 'reminder.send',
        aggregateId: 'r',
        payload: {},
        delayMs: 1_500,
      });
      await client.query('COMMIT');
    } finally {
      await client.end();
    }
    const committedAt = Date.now();
    // The idle poll is a minute away: only the next-due read brings the tenant back.
    await expect
      .poll(() => publisher.published.has(written.messageId), { timeout: 15_000 })
      .toBe(true);
    expect(publisher.published.get(written.messageId)! - committedAt).toBeGreaterThanOrEqual(1_000);
  }, 30_000);
  it('tells once per tenant whose schema records the other engine (migration 036)', async () => {
    await fleet?.stop();
    const tenant1 = new pg.Client({ connectionString: family.url(family.name(1)) });
    await tenant1.connect();
    try {
      await setDatabaseEngine(fromPg(tenant1), 'lanes');
    } finally {
      await tenant1.end();
    }
    const publisher = recordingPublisher({ callMs: 0 });
    fleet = lanesFleet(publisher, {});
    const told: { database: string; engine: string; recordedEngine: string }[] = [];
    fleet.on('fleet:target:other-engine', ({ target, engine, recordedEngine }) =>
      told.push({ database: target.name, engine, recordedEngine }),
    );
    await fleet.start();
    for (let round = 0; round < 2; round++) {
      const written = await Promise.all(
        [0, 1].map(async (n) => {
          const [m] = await commitWithSequences(
            family.url(family.name(n)),
            [{ topic: 'order.placed', aggregateId: `o${round}`, payload: {} }],
            { engine: 'lanes' },
          );
          return m!.messageId;
        }),
      );
      await expect
        .poll(() => written.every((id) => publisher.published.has(id)), { timeout: 15_000 })
        .toBe(true);
    }
    // Tenant 0 records claims (the template's), tenant 1 lanes: only tenant 0, and once.
    expect(told).toEqual([{ database: family.name(0), engine: 'lanes', recordedEngine: 'claims' }]);
  }, 30_000);

  it("without an engine, serves each tenant by its schema's record: claims and lanes in one fleet", async () => {
    await fleet?.stop();
    const tenant1 = new pg.Client({ connectionString: family.url(family.name(1)) });
    await tenant1.connect();
    try {
      await setDatabaseEngine(fromPg(tenant1), 'lanes', { force: true });
    } finally {
      await tenant1.end();
    }
    // Written by a writer without an engine, which follows the record too.
    const write = async (n: number, aggregateId: string) => {
      const client = new pg.Client({ connectionString: family.url(family.name(n)) });
      await client.connect();
      try {
        await client.query('BEGIN');
        const [m] = await createOutbox().enqueue(fromPg(client), [
          { topic: 'order.placed', aggregateId, payload: {} },
        ]);
        await client.query('COMMIT');
        return m!.messageId;
      } finally {
        await client.end();
      }
    };
    const tables = async (n: number) => {
      const client = new pg.Client({ connectionString: family.url(family.name(n)) });
      await client.connect();
      try {
        const { rows } = await client.query<{ claims: number; lanes: number }>(
          `SELECT (SELECT count(*) FROM outbox_messages WHERE aggregate_id LIKE 'rec%')::int AS claims,
                  (SELECT count(*) FROM outbox_lane_messages WHERE aggregate_id LIKE 'rec%')::int AS lanes`,
        );
        return rows[0]!;
      } finally {
        await client.end();
      }
    };
    const publisher = recordingPublisher({ callMs: 0 });
    fleet = createFleetDispatcher({
      servers: [inject('adminDatabaseUrl')],
      databases: family.glob,
      publisher,
      leaseMs: 5_000,
      pollIntervalMs: 50,
      warmMs: 0,
      idlePollMs: 60_000,
      maxConnections: 2, // no engine: each tenant by its record
    });
    const told: string[] = [];
    fleet.on('fleet:target:other-engine', ({ target }) => told.push(target.name));
    await fleet.start();
    for (let round = 0; round < 2; round++) {
      const written = await Promise.all([0, 1].map((n) => write(n, `rec${round}`)));
      await expect
        .poll(() => written.every((id) => publisher.published.has(id)), { timeout: 15_000 })
        .toBe(true);
    }
    expect(await tables(0)).toEqual({ claims: 2, lanes: 0 });
    expect(await tables(1)).toEqual({ claims: 0, lanes: 2 });
    expect(told).toEqual([]);
    await fleet.stop();

    // An option the lanes engine does not take fails the tenant on lanes only.
    const second = recordingPublisher({ callMs: 0 });
    fleet = createFleetDispatcher({
      servers: [inject('adminDatabaseUrl')],
      databases: family.glob,
      publisher: second,
      maxConnections: 3,
      concurrency: 2,
      leaseMs: 5_000,
      pollIntervalMs: 50,
      warmMs: 0,
      idlePollMs: 60_000,
    });
    const failures: { database: string; error: string }[] = [];
    fleet.on('fleet:target:failure', ({ target, error }) =>
      failures.push({ database: target.name, error: error.message }),
    );
    await fleet.start();
    const [claims, lanes] = await Promise.all([write(0, 'rec2'), write(1, 'rec2')]);
    await expect.poll(() => second.published.has(claims), { timeout: 15_000 }).toBe(true);
    await expect.poll(() => failures.length, { timeout: 15_000 }).toBeGreaterThan(0);
    expect(failures[0]).toEqual({
      database: family.name(1),
      error: expect.stringContaining('records the lanes engine, which does not take concurrency'),
    });
    expect(second.published.has(lanes)).toBe(false);
  }, 60_000);
});
