import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDispatcher, fromPg, migrate } from '../../../src/index.js';
import { dispatchedSinceSql } from '../../../src/sql/dashboard.js';
import { explainAnalyze } from '../../helpers/explain.js';
import { blocksOf, noopPublisher } from '../../helpers/held-snapshot.js';
import { startEmbeddedPostgres, type EmbeddedServer } from '../../helpers/postgres-server.js';
import { withDatabase } from '../../helpers/url.js';

/**
 * What keeps the dashboard's time windows cheap on the dispatched ring: the BRIN index on
 * `dispatched_at` is summarized range by range as the settle fills its pages, by autovacuum
 * workers (`autosummarize`). Until a range is summarized every window reads it whole. Shown on a
 * private server with autovacuum on (the shared test server runs with it off) and a one-second
 * naptime: 30,000 messages drained into a ring table that already holds 200,000, then the rate
 * sample of the last second (nothing in it) explained; the same into a table whose index has
 * autosummarize off. 30,000 inserts are under the 20% that would trigger a vacuum of either
 * table, so what summarizes the first is the work items alone.
 */
let server: EmbeddedServer;
let pool: pg.Pool;
beforeAll(async () => {
  server = await startEmbeddedPostgres({
    flags: ['-c', 'autovacuum=on', '-c', 'autovacuum_naptime=1'],
  });
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query('CREATE DATABASE ring_autovacuum');
  await admin.end();
  pool = new pg.Pool({ connectionString: withDatabase(server.url, 'ring_autovacuum'), max: 6 });
  pool.on('error', () => undefined);
  await migrate(fromPg(pool));
  // Both tables already hold a day's worth: the default threshold is then 20% of that.
  for (const table of ['outbox_dispatched_0', 'outbox_dispatched_1']) {
    await pool.query(
      `INSERT INTO ${table} (id, message_id, aggregate_id, topic, payload, headers, sequence,
                            created_at, available_at, dispatched_at, attempts, shadow, ordered,
                            ready)
       SELECT -g - ${table.endsWith('1') ? 1_000_000 : 0}, gen_random_uuid(), 'old', 'mail.send',
              '{}', '{}', g, now() - interval '2 hours', now() - interval '2 hours',
              now() - interval '2 hours' + g * interval '10 microseconds', 1, false, false, false
       FROM generate_series(1, 200000) g`,
    );
    await pool.query(`VACUUM ANALYZE ${table}`);
  }
  // The control: table 1's ranges are left for a vacuum to summarize.
  await pool.query(`ALTER INDEX outbox_dispatched_1_dispatched_at_idx SET (autosummarize = off)`);
}, 180_000);
afterAll(async () => {
  await pool?.end();
  await server?.stop();
});

const vacuums = async (table: string) =>
  (
    await pool.query<{ n: number }>(
      `SELECT autovacuum_count::int AS n FROM pg_stat_user_tables WHERE relname = $1`,
      [table],
    )
  ).rows[0]!.n;

/** Writes and drains 30,000 messages into the ring's table `slot`. */
async function drainInto(slot: number) {
  await pool.query(`UPDATE outbox_dispatched_ring SET slot = $1`, [slot]);
  await pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload, ordered)
     SELECT 'a-' || g, 'mail.send', '{}', false FROM generate_series(1, 30000) g`,
  );
  const dispatcher = createDispatcher({ executor: fromPg(pool), publisher: noopPublisher });
  expect((await dispatcher.drain()).published).toBe(30_000);
}

/** Buffers of the rate sample of the last second, long after the drain: nothing is in it. */
async function rateSampleBuffers() {
  const client = await pool.connect();
  try {
    const since = (await client.query<{ at: Date }>(`SELECT now() - interval '1 second' AS at`))
      .rows[0]!.at;
    // The index path (see dispatched-reads-bound.test.ts for why the planner may prefer a scan).
    await client.query('SET enable_seqscan = off');
    return blocksOf(await explainAnalyze(client, dispatchedSinceSql('public'), [since]));
  } finally {
    client.release();
  }
}

describe('summaries of the dispatched ring under autovacuum', () => {
  it('a window of the last second reads next to nothing; without autosummarize it reads all that was dispatched since the last vacuum', async () => {
    const settle = () => new Promise((resolve) => setTimeout(resolve, 4_000));
    await drainInto(0);
    await settle(); // a few naptimes: the work items are done, the last second is empty
    const summarized = await rateSampleBuffers();
    await drainInto(1);
    await settle();
    expect(await vacuums('outbox_dispatched_1')).toBe(0);
    const unsummarized = await rateSampleBuffers();
    console.log(
      `rate sample of an empty second: ${summarized} buffers, ${unsummarized} without autosummarize`,
    );
    expect(unsummarized, JSON.stringify({ summarized, unsummarized })).toBeGreaterThan(
      summarized * 5,
    );
    expect(summarized).toBeLessThan(50);
  }, 300_000);
});
