import { insertDispatchedHistory } from './dispatched-history.js';
import type { BenchDatabase } from './database.js';

/** What {@link loadChains} writes. */
export interface ChainLoad {
  /** Messages in all. */
  count: number;
  /** Aggregates `<prefix><n>`, n = 0 … aggregates-1, taken round-robin in id order. */
  aggregates: number;
  prefix: string;
  topic: string;
  /**
   * Written as history: created 10 days ago, dispatched 9 days ago, into the dispatched ring's
   * first table, where settles put published messages since migration 018. Default: pending.
   */
  dispatched?: boolean;
}

/**
 * Bulk-loads ordered messages exactly as the insert trigger writes them (migrations 001 and 009):
 * per aggregate, sequences 1…k in id order, `ordered`, `ready` on its first pending message only,
 * and its counter row in `outbox_aggregates` — or, as history, the batches a settle leaves in
 * the ring's slot 0 (dispatched, `ready` false, ids from the outbox's sequence) with the same
 * counter rows — but in one statement with triggers off (`SET LOCAL
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
    const rows = `SELECT $3 || (g % $2) AS aggregate_id, $4 AS topic, jsonb_build_object('n', g) AS payload,
                         g / $2 + 1 AS sequence, true AS ordered`;
    const values = [load.count, load.aggregates, load.prefix, load.topic];
    if (history)
      await insertDispatchedHistory(
        client,
        `${rows}, nextval(pg_get_serial_sequence('outbox', 'id')) AS id,
                  outbox_uuid_v7() AS message_id, '{}'::jsonb AS headers, false AS ready,
                  now() - interval '10 days' AS created_at, now() - interval '10 days' AS available_at,
                  now() - interval '9 days' AS dispatched_at, 1 AS attempts, false AS shadow
           FROM generate_series(0, $1::int - 1) g`,
        values,
      );
    else
      await client.query(
        `INSERT INTO outbox (aggregate_id, topic, payload, sequence, ordered, ready,
                             created_at, available_at, attempts)
         ${rows}, g < $2, now(), now(), 0
         FROM generate_series(0, $1::int - 1) g
         ORDER BY g`,
        values,
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
  await db.pool.query('VACUUM ANALYZE outbox, outbox_aggregates, outbox_dispatched_batch_0');
}
