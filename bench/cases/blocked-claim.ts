import { fromPg, PgOutboxStore } from '../../src/index.js';
import { loadChains } from '../lib/chains.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce } from '../lib/database.js';
import { log, percentiles, type Percentiles } from '../lib/measure.js';

const HEADS = 200;
const BLOCK = 10;
const WARM_UP = 20;

/** 200 aggregates with one pending message each, written through the insert trigger. */
async function writeHeads(db: BenchDatabase): Promise<void> {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT 'other-' || g, 'payment.charge', jsonb_build_object('n', g)
     FROM generate_series(1, $1::int) g`,
    [HEADS],
  );
  await db.pool.query('VACUUM ANALYZE outbox');
}

/**
 * One claim as the dispatcher sends it (`PgOutboxStore`, batch 200, its own autocommit statement
 * with the WAL flush), timed from the client; then its leases are released, untimed, so every
 * claim finds the same 200 heads.
 */
async function timedClaim(store: PgOutboxStore, owner: string): Promise<number> {
  const started = performance.now();
  const claimed = await store.claim({
    owner,
    batchSize: HEADS,
    leaseMs: 30_000,
    deadLettersBlock: true,
  });
  const ms = performance.now() - started;
  if (claimed.length !== HEADS || claimed.some((m) => !m.aggregateId.startsWith('other-')))
    throw new Error(`blocked claim: got ${claimed.length} messages, expected the ${HEADS} heads`);
  await store.release(
    owner,
    claimed.map((m) => m.rowId),
  );
  return ms;
}

/**
 * `blocked_claim_ms`: p95 of a claim that returns 200 other aggregates' heads while `depth`
 * messages wait behind one dead-lettered head (policy `hold`: the aggregate stays blocked until
 * the dead letter is replayed). `blockedDb` gets the blocked aggregate (bulk-loaded, lib/chains.ts,
 * its head then dead-lettered as the failed settle leaves it) and the 200 heads; `plainDb` only the
 * same 200 heads — the same claim with nothing blocked, sampled in alternation (blocks of 10
 * claims after 20 of warm-up each), so the machine's noise shows on both. Before issue 16 every
 * claim walked the blocked aggregate's rows (1.9 s at 100,000).
 */
export async function blockedClaim(
  blockedDb: BenchDatabase,
  plainDb: BenchDatabase,
  depth: number,
  samples: number,
) {
  await loadChains(blockedDb, {
    count: depth,
    aggregates: 1,
    prefix: 'deep-',
    topic: 'payment.charge',
  });
  await blockedDb.pool.query(
    `UPDATE outbox SET dead_lettered_at = now(), attempts = 10, last_error = 'poison'
     WHERE aggregate_id = 'deep-0' AND sequence = 1`,
  );
  await writeHeads(blockedDb);
  await writeHeads(plainDb);
  await quiesce(blockedDb);
  const stores = {
    blocked: new PgOutboxStore(fromPg(blockedDb.pool)),
    plain: new PgOutboxStore(fromPg(plainDb.pool)),
  };
  const ms = { blocked: [] as number[], plain: [] as number[] };
  let n = 0;
  for (const which of ['blocked', 'plain'] as const)
    for (let i = 0; i < WARM_UP; i++) await timedClaim(stores[which], `warm#${n++}`);
  while (ms.blocked.length < samples) {
    for (const which of ['blocked', 'plain'] as const)
      for (let i = 0; i < BLOCK; i++)
        ms[which].push(await timedClaim(stores[which], `bench#${n++}`));
  }
  const result: Record<'blocked' | 'plain', Percentiles> = {
    blocked: percentiles(ms.blocked),
    plain: percentiles(ms.plain),
  };
  log(
    `claim of ${HEADS} heads: p50/p95 ${result.blocked.p50}/${result.blocked.p95} ms with ${depth} messages behind a dead-lettered head, ${result.plain.p50}/${result.plain.p95} ms without`,
  );
  return { p95: result.blocked.p95, depth, samples: ms.blocked.length, ms: result };
}
