import type { BenchDatabase } from '../lib/database.js';
import { log } from '../lib/measure.js';

/**
 * The ceiling for `dispatch_vs_pg_boss` / `dispatch_vs_graphile_worker` on this machine: what
 * the least possible lease-based queue loop does on a MINIMAL table (id, payload, due time, lock
 * columns, done time; a primary key and one partial pending index; no ordering, no message id,
 * no retention index; half-empty pages, as migration 008 gives the outbox, so claims are HOT),
 * one connection, batches of 200, prepared statements:
 * - `mark`: claim, then `UPDATE … SET done_at` (keeps history, as an outbox must);
 * - `delete`: claim, then `DELETE` (keeps nothing — graphile-worker's way).
 * If even these loops are not 5x a peer, no dispatcher built on claim + settle statements can
 * be: the target cannot hold here, whatever the dispatcher does in Node.
 */
const CREATE = `
DROP TABLE IF EXISTS bench_minimal_queue;
CREATE TABLE bench_minimal_queue (
  id bigserial PRIMARY KEY,
  payload jsonb NOT NULL,
  run_at timestamptz NOT NULL DEFAULT now(),
  locked_by text,
  locked_until timestamptz,
  done_at timestamptz
) WITH (fillfactor = 50);
CREATE INDEX bench_minimal_queue_pending ON bench_minimal_queue (run_at, id) WHERE done_at IS NULL;`;

const CLAIM = `
WITH due AS (
  SELECT id FROM bench_minimal_queue
  WHERE done_at IS NULL AND run_at <= now() AND (locked_until IS NULL OR locked_until <= now())
  ORDER BY run_at, id
  LIMIT 200
  FOR UPDATE SKIP LOCKED
)
UPDATE bench_minimal_queue q SET locked_by = $1, locked_until = now() + interval '30 seconds'
FROM due WHERE q.id = due.id
RETURNING q.id, q.payload`;

const SETTLE = {
  mark: `UPDATE bench_minimal_queue SET done_at = now(), locked_by = NULL, locked_until = NULL
         WHERE id = ANY($1::bigint[]) AND locked_by = $2`,
  delete: `DELETE FROM bench_minimal_queue WHERE id = ANY($1::bigint[]) AND locked_by = $2`,
} as const;

async function minimalRate(
  db: BenchDatabase,
  count: number,
  settle: keyof typeof SETTLE,
): Promise<number> {
  await db.pool.query(CREATE);
  await db.pool.query(
    `INSERT INTO bench_minimal_queue (payload) SELECT jsonb_build_object('n', g) FROM generate_series(1, $1) g`,
    [count],
  );
  await db.pool.query('VACUUM ANALYZE bench_minimal_queue');
  const client = await db.client();
  let done = 0;
  const started = performance.now();
  try {
    for (let batch = 0; ; batch++) {
      const owner = `minimal#${batch}`;
      const claimed = await client.query<{ id: string }>({
        name: 'minimal_claim',
        text: CLAIM,
        values: [owner],
      });
      if (claimed.rows.length === 0) break;
      await client.query({
        name: `minimal_${settle}`,
        text: SETTLE[settle],
        values: [claimed.rows.map((row) => row.id), owner],
      });
      done += claimed.rows.length;
    }
  } finally {
    await client.end();
  }
  const ms = performance.now() - started;
  await db.pool.query('DROP TABLE bench_minimal_queue');
  if (done !== count) throw new Error(`minimal ${settle} loop did ${done} of ${count}`);
  return (count / ms) * 1000;
}

/** Best of `rounds` runs of each minimal loop, rows/s. */
export async function minimalQueueCeiling(db: BenchDatabase, count: number, rounds: number) {
  const best = { mark: 0, delete: 0 };
  for (let r = 0; r < rounds; r++) {
    best.mark = Math.max(best.mark, await minimalRate(db, count, 'mark'));
    best.delete = Math.max(best.delete, await minimalRate(db, count, 'delete'));
  }
  log(
    `minimal queue table, 1 connection: claim+mark ${Math.round(best.mark)} rows/s, claim+delete ${Math.round(best.delete)} rows/s`,
  );
  return { mark: Math.round(best.mark), delete: Math.round(best.delete) };
}
