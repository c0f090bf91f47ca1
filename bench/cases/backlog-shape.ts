import { createDispatcher, fromPg } from '../../src/index.js';
import { loadChains } from '../lib/chains.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce, resetOutbox, seedPending } from '../lib/database.js';
import { log, round, timed } from '../lib/measure.js';
import { noopPublisher } from './enqueue.js';

const TOPIC = 'payment.charge'; // ordered

/** Our dispatcher (no-op publisher, batch 200, one loop) drains what is pending; messages/s. */
async function drainRate(db: BenchDatabase, count: number): Promise<number> {
  await quiesce(db);
  const dispatcher = createDispatcher({
    executor: fromPg(db.pool),
    publisher: noopPublisher,
    batchSize: 200,
  });
  let published = 0;
  const ms = await timed(async () => {
    published = (await dispatcher.drain()).published;
  });
  if (published !== count) throw new Error(`dispatched ${published} of ${count}`);
  return (count / ms) * 1000;
}

/**
 * `deep_backlog_ratio`: `count` ordered messages on 20 aggregates (a backlog after an outage:
 * 10,000 deep each at 200,000) over the same count on 5,000 aggregates, drained by our
 * dispatcher. Both are bulk-loaded the same way (lib/chains.ts: what the trigger writes, without
 * it; the writer is not what is measured here, and through it the deep chains alone would take
 * minutes to load), on the same database, alternated, best of `rounds` each.
 */
export async function deepBacklog(db: BenchDatabase, count: number, rounds: number) {
  const best = { deep: 0, wide: 0 };
  const drainOf = async (aggregates: number) => {
    await resetOutbox(db.pool);
    await loadChains(db, { count, aggregates, prefix: 'agg-', topic: TOPIC });
    return drainRate(db, count);
  };
  for (let r = 0; r < rounds; r++) {
    best.wide = Math.max(best.wide, await drainOf(5_000));
    best.deep = Math.max(best.deep, await drainOf(20));
  }
  await resetOutbox(db.pool);
  log(
    `deep backlog: ${Math.round(best.deep)} msg/s on 20 aggregates, ${Math.round(best.wide)} on 5,000 (${count} messages)`,
  );
  return {
    ratio: round(best.deep / best.wide, 3),
    count,
    perSecond: {
      twentyAggregates: Math.round(best.deep),
      fiveThousandAggregates: Math.round(best.wide),
    },
  };
}

/**
 * One 500-aggregate drain that keeps what else is in the table: deletes only its own messages
 * and counter rows, then writes `count` new ones through the insert trigger (the writer's work
 * on a table of a million counters is part of what an idle population could slow down).
 */
async function spreadDrainKeepingHistory(db: BenchDatabase, count: number): Promise<number> {
  await db.pool.query(`DELETE FROM outbox WHERE aggregate_id LIKE 'agg-%'`);
  await db.pool.query(`DELETE FROM outbox_aggregates WHERE aggregate_id LIKE 'agg-%'`);
  await seedPending(db.pool, count, { topic: TOPIC, aggregates: 500 });
  return drainRate(db, count);
}

/**
 * `idle_aggregates_ratio`: the 500-aggregate drain (`count` ordered messages) on `idleDb`, which
 * also holds `idle` other aggregates with no pending message — one dispatched message each and
 * its counter row, bulk-loaded as history (lib/chains.ts) — over the same drain on `emptyDb`,
 * which holds nothing else. Two databases created for the case, alternated, best of `rounds`
 * each (as history_scaling, and for the same reason: one after the other, whatever the machine
 * did during the load tilted the ratio).
 */
export async function idleAggregates(
  emptyDb: BenchDatabase,
  idleDb: BenchDatabase,
  idle: number,
  count: number,
  rounds: number,
) {
  const loadMs = await timed(() =>
    loadChains(idleDb, {
      count: idle,
      aggregates: idle,
      prefix: 'idle-',
      topic: TOPIC,
      dispatched: true,
    }),
  );
  log(`idle aggregates: loaded ${idle} aggregates of history in ${Math.round(loadMs / 1000)} s`);
  const best = { empty: 0, withIdle: 0 };
  for (let r = 0; r < rounds; r++) {
    best.empty = Math.max(best.empty, await spreadDrainKeepingHistory(emptyDb, count));
    best.withIdle = Math.max(best.withIdle, await spreadDrainKeepingHistory(idleDb, count));
  }
  log(
    `idle aggregates: ${Math.round(best.withIdle)} msg/s beside ${idle} idle aggregates, ${Math.round(best.empty)} without`,
  );
  return {
    ratio: round(best.withIdle / best.empty, 3),
    idleAggregates: idle,
    count,
    perSecond: { withIdle: Math.round(best.withIdle), empty: Math.round(best.empty) },
  };
}
