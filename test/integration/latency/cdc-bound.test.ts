import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCdcDispatcher, parseLsn } from '../../../src/cdc/index.js';
import {
  fromPg,
  InMemoryPublisher,
  PgOutboxStore,
  type OutboxMessage,
} from '../../../src/index.js';
import type { TestDatabase } from '../../helpers/database.js';
import { explainingExecutor } from '../../helpers/explain.js';
import { createLogicalTestDatabase } from '../../helpers/logical-database.js';
import { checkHistory, eventsInOrder, expectedOf } from '../../helpers/history.js';
import { enqueueCommitted } from '../../helpers/outbox-fixtures.js';
import { dropSlots, slotState } from '../../fixtures/latency/cdc-helpers.js';

/**
 * Issue 16 for the CDC dispatcher: its work per claim and per look at its candidates follows the
 * batch, not the number of rows the WAL announced. 20,000 messages are committed on ONE aggregate
 * whose head another dispatcher holds, then one on another aggregate: every candidate of the deep
 * aggregate is blocked. Every claim and candidate-state query the CDC dispatcher sends runs
 * under EXPLAIN ANALYZE too (helpers/explain.ts), and the outbox rows each one reads are counted.
 * Before, the claim carried all 20,000 candidate ids (`o.id = ANY($4)`) and the state query read
 * every candidate with a walk of its predecessors (quadratic in a deep aggregate).
 */
let db: TestDatabase;
beforeAll(async () => {
  db = await createLogicalTestDatabase();
});
afterAll(async () => {
  try {
    if (db) await dropSlots(db.pool, db.name);
  } finally {
    await db?.drop();
  }
});

const DEEP = 20_000;
const BATCH = 100;

const labelOf = (text: string): string | undefined => {
  if (text.includes('outbox_claim(')) return 'claim';
  if (/unnest\(\$1::bigint\[\]\) AS c\(id\)/.test(text)) return 'states';
  if (text.includes('AS "dueInMs"')) return 'due';
  return undefined;
};

describe('CDC dispatcher with 20,000 announced rows on one blocked aggregate', () => {
  it('claims and candidate reads stay bounded by the batch; everything is delivered in order and confirmed', async () => {
    const slot = `ao_cdc_bound_${db.name.slice(-8)}`;
    const topic = 'payment.charge';
    // The deep aggregate's head, written before the slot exists and held by another dispatcher.
    const written = await enqueueCommitted(db.pool, [{ topic, aggregateId: 'deep', payload: 0 }]);
    const holder = new PgOutboxStore(fromPg(db.pool));
    const [head] = await holder.claim({ owner: 'holder#1', batchSize: 1, leaseMs: 300_000 });
    expect(head).toMatchObject({ aggregateId: 'deep', sequence: 1 });

    const { executor, samples } = explainingExecutor(db.pool, labelOf);
    const publisher = new InMemoryPublisher();
    const cdc = createCdcDispatcher({
      executor,
      replicationConnection: { connectionString: db.url },
      publisher,
      slotName: slot,
      batchSize: BATCH,
      sweepIntervalMs: 600_000,
      confirmIntervalMs: 100,
      recheckMs: 100,
    });
    try {
      let off = () => {};
      const swept = new Promise<void>((resolve) => {
        off = cdc.on('dispatcher:claim:success', () => resolve());
      });
      await cdc.start();
      await swept; // the sweeper's catch-up claim at start is behind us
      off();

      const deep: OutboxMessage[] = Array.from({ length: DEEP }, (_, n) => ({
        topic,
        aggregateId: 'deep',
        payload: { n: n + 1 },
      }));
      written.push(...(await enqueueCommitted(db.pool, deep)));
      written.push(
        ...(await enqueueCommitted(db.pool, [{ topic, aggregateId: 'other', payload: 1 }])),
      );

      // The other aggregate goes out while every deep candidate waits behind the held head...
      await expect
        .poll(() => publisher.published.map((m) => m.aggregateId), { timeout: 60_000 })
        .toEqual(['other']);
      // ... and the dispatcher looked at its blocked candidates again and again meanwhile.
      const looks = () => samples.filter((s) => s.label === 'states').length;
      const before = looks();
      await expect.poll(looks, { timeout: 30_000 }).toBeGreaterThanOrEqual(before + 3);
      expect(publisher.published).toHaveLength(1);

      // The holder gives the head back without publishing: the deep aggregate drains, in order.
      await holder.release('holder#1', [head!.rowId]);
      await expect
        .poll(() => publisher.published.length, { timeout: 120_000, interval: 500 })
        .toBe(DEEP + 2);
      const report = checkHistory(expectedOf(written), eventsInOrder(publisher.published));
      expect(report).toMatchObject({
        lost: [],
        unexpected: [],
        orderViolations: [],
        duplicates: 0,
      });

      // Every announced row is settled: the slot is confirmed past the last commit.
      const { rows } = await db.pool.query<{ lsn: string }>(
        `SELECT pg_current_wal_lsn()::text AS lsn`,
      );
      await expect
        .poll(
          async () =>
            parseLsn((await slotState(db.pool, slot))!.confirmed) >= parseLsn(rows[0]!.lsn),
          { timeout: 30_000 },
        )
        .toBe(true);
    } finally {
      await cdc.stop();
    }

    // The bound: what each claim and each candidate read costs, whatever waits behind the head.
    const claims = samples.filter((s) => s.label === 'claim');
    const states = samples.filter((s) => s.label === 'states');
    const most = (list: typeof samples, key: 'rowsRead' | 'longestArray') =>
      Math.max(0, ...list.map((s) => s[key] ?? 0));
    const summary = {
      claims: claims.length,
      states: states.length,
      claimRowsRead: most(claims, 'rowsRead'),
      stateRowsRead: most(states, 'rowsRead'),
      longestArray: most(samples, 'longestArray'),
    };
    expect(claims.length, JSON.stringify(summary)).toBeGreaterThan(DEEP / BATCH);
    // A claim reads its batch (a run of up to 100 plus heads and probes): 300 at most here.
    expect(summary.claimRowsRead, JSON.stringify(summary)).toBeLessThan(1_000);
    // A look at the candidates reads a slice of them (publish-cycle.ts) and their aggregate's
    // head: 501 here. Before: every candidate and a walk of its predecessors.
    expect(summary.stateRowsRead, JSON.stringify(summary)).toBeLessThan(1_500);
    // No statement carries the candidates as a whole.
    expect(summary.longestArray, JSON.stringify(summary)).toBeLessThanOrEqual(1_000);
  }, 240_000);
});
