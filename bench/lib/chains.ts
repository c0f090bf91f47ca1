import type { BenchDatabase } from './database.js';

/** What {@link loadChains} writes. */
export interface ChainLoad {
  /** Messages in all. */
  count: number;
  /** Aggregates `<prefix><n>`, n = 0 … aggregates-1, taken round-robin in id order. */
  aggregates: number;
  prefix: string;
  topic: string;
  /** Written as history: created 10 days ago, dispatched 9 days ago. Default: pending. */
  dispatched?: boolean;
}

/**
 * Bulk-loads ordered messages exactly as the insert trigger writes them (migrations 001 and 009):
 * per aggregate, sequences 1…k in id order, `ordered`, `ready` on its first pending message only
 * (dispatched history: on every message, as settles leave it), and its counter row in
 * `outbox_aggregates` — but in one statement with triggers off (`SET LOCAL
 * session_replication_role = replica`), as test/integration/dispatcher/claim-bound.test.ts does.
 * Through the trigger, one statement writing one aggregate's messages costs more the longer its
 * chain (20,000 on one aggregate: 3.2 s here, 20,000 on 500: 0.7 s; 100,000 on one: a minute),
 * so a deep backlog would spend minutes loading. Used where what is measured is the dispatcher on
 * a backlog of that shape, not the writer that produced it.
 */
export async function loadChains(db: BenchDatabase, load: ChainLoad): Promise<void> {
  const history = load.dispatched === true;
  const client = await db.client();
  try {
    await client.query('BEGIN');
    await client.query('SET LOCAL session_replication_role = replica');
    await client.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, sequence, ordered, ready,
                           created_at, available_at, dispatched_at, attempts)
       SELECT $3 || (g % $2), $4, jsonb_build_object('n', g), g / $2 + 1, true,
              $5 OR g < $2,
              CASE WHEN $5 THEN now() - interval '10 days' ELSE now() END,
              CASE WHEN $5 THEN now() - interval '10 days' ELSE now() END,
              CASE WHEN $5 THEN now() - interval '9 days' END,
              CASE WHEN $5 THEN 1 ELSE 0 END
       FROM generate_series(0, $1::int - 1) g
       ORDER BY g`,
      [load.count, load.aggregates, load.prefix, load.topic, history],
    );
    // Aggregate a has the rows g ≡ a (mod aggregates): count / aggregates of them, one more for
    // the first count % aggregates.
    await client.query(
      `INSERT INTO outbox_aggregates (aggregate_id, last_sequence)
       SELECT $3 || a, $1::int / $2 + CASE WHEN a < $1::int % $2 THEN 1 ELSE 0 END
       FROM generate_series(0, least($1::int, $2) - 1) a`,
      [load.count, load.aggregates, load.prefix],
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    await client.end();
  }
  await db.pool.query('VACUUM ANALYZE outbox, outbox_aggregates');
}
