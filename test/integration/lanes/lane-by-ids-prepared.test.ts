import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { OutboxPoolerError } from '../../../src/core/errors.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { armed, enqueueLanes, listenWakeSource } from '../../helpers/lanes.js';
import { requirePgBouncer, startPgBouncer } from '../../helpers/pgbouncer.js';

/**
 * The read of what a NOTIFY names (`outbox_lane_by_ids`) is the one dispatcher statement run as
 * a named prepared statement where the executor prepares (sql/lanes.ts `laneByIdsSql`: its parse
 * and plan were a quarter of its round trip, on the path from a commit to its publish). Behind
 * PgBouncer in transaction mode without prepared-statement support, the first call that meets
 * a lost statement makes the dispatcher run it unprepared from then on; nothing is lost.
 */
let db: TestDatabase;
beforeEach(async () => {
  db = await createTestDatabase();
});
afterEach(async () => {
  await db.drop();
});

/** A lane dispatcher on `pool`, woken by a LISTEN on the database itself, recording failures. */
function start(pool: pg.Pool, options: { preparedStatements?: boolean } = {}) {
  const published: OutgoingMessage[] = [];
  const failures: Error[] = [];
  const dispatcher = createLaneDispatcher({
    executor: fromPg(pool, options),
    publisher: {
      publish: async (messages) => {
        published.push(...messages);
        return messages.map(() => ({ status: 'published' as const }));
      },
    },
    pollIntervalMs: 60_000,
    wakeSource: listenWakeSource(db.url),
  });
  dispatcher.on('dispatcher:claim:failure', ({ error }) => failures.push(error));
  dispatcher.start();
  return { dispatcher, published, failures };
}

/** Writes `n` messages one at a time, each once the last went out (each is named by its NOTIFY). */
async function trickle(run: ReturnType<typeof start>, n: number, prefix: string) {
  await armed(db.pool);
  await run.dispatcher.onIdle();
  await new Promise((resolve) => setTimeout(resolve, 300));
  for (let i = 0; i < n; i++) {
    await enqueueLanes(db.pool, [
      { topic: 'mail.send', aggregateId: `${prefix}-${i}`, payload: {} },
    ]);
    await expect.poll(() => run.published.length, { timeout: 10_000 }).toBe(i + 1);
  }
}

const preparedByIds = async (pool: pg.Pool) =>
  Number(
    (
      await pool.query<{ n: string }>(
        `SELECT count(*) AS n FROM pg_prepared_statements WHERE statement LIKE '%outbox_lane_by_ids%'`,
      )
    ).rows[0]!.n,
  );

describe('lanes engine: the read by id, prepared', () => {
  it('runs as a named prepared statement on a direct connection, and not with preparedStatements: false', async () => {
    // One connection: the test's look at pg_prepared_statements runs on the dispatcher's.
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    const run = start(pool);
    try {
      await trickle(run, 5, 'direct');
      await run.dispatcher.stop();
      expect(await preparedByIds(pool)).toBe(1);
      expect(run.failures).toEqual([]);
    } finally {
      await run.dispatcher.stop();
      await pool.end();
    }
    const unprepared = new pg.Pool({ connectionString: db.url, max: 1 });
    const off = start(unprepared, { preparedStatements: false });
    try {
      await trickle(off, 5, 'off');
      await off.dispatcher.stop();
      expect(await preparedByIds(unprepared)).toBe(0);
    } finally {
      await off.dispatcher.stop();
      await unprepared.end();
    }
  });

  it.runIf(requirePgBouncer())(
    'through PgBouncer in transaction mode: one call meets the lost statement, the rest run unprepared, every message goes out once',
    async () => {
      const bouncer = await startPgBouncer(db.url, { poolSize: 2 });
      const pool = new pg.Pool({ connectionString: bouncer.url(db.url), max: 4 });
      pool.on('error', () => undefined);
      const run = start(pool);
      try {
        // Two connections of the pool hold the prepared name on whichever server connection
        // they got: the next by-id calls land elsewhere.
        await trickle(run, 40, 'pooled');
        const lost = run.failures.filter((e) => e instanceof OutboxPoolerError);
        // One: the calls by id run one at a time, and the first loss switches them all.
        expect(lost.length, run.failures.map((e) => e.message).join('\n')).toBe(1);
        expect(run.failures).toHaveLength(1);
        const ids = run.published.map((m) => m.aggregateId);
        expect(new Set(ids).size).toBe(40);
        expect(ids).toHaveLength(40);
      } finally {
        await run.dispatcher.stop();
        await pool.end();
        await bouncer.stop();
      }
    },
  );
});
