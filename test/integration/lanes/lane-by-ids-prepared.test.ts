import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { OutboxPoolerError } from '../../../src/core/errors.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { armed, enqueueLanes, listenWakeSource } from '../../helpers/lanes.js';
import { requirePgBouncer, startPgBouncer } from '../../helpers/pgbouncer.js';
import { recordingExecutor } from '../../helpers/recording-executor.js';

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
  const { executor, calls } = recordingExecutor(fromPg(pool, options));
  /** Every read by id, in order: its text as sent and whether it failed. */
  const byIds = () => calls.filter((call) => call.text.includes('outbox_lane_by_ids('));
  const dispatcher = createLaneDispatcher({
    executor,
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
  return { dispatcher, published, failures, byIds };
}

/** Writes `n` messages one at a time, each once the last went out (each is named by its NOTIFY). */
async function trickle(run: ReturnType<typeof start>, n: number, prefix: string, first = true) {
  if (first) {
    await armed(db.pool);
    await run.dispatcher.onIdle();
    await new Promise((resolve) => setTimeout(resolve, 300));
  }
  const from = run.published.length;
  for (let i = 0; i < n; i++) {
    await enqueueLanes(db.pool, [
      { topic: 'mail.send', aggregateId: `${prefix}-${i}`, payload: {} },
    ]);
    await expect.poll(() => run.published.length, { timeout: 10_000 }).toBe(from + i + 1);
  }
}

/** The application name of the dispatcher's connection through PgBouncer. */
const BOUNCED = 'ao-by-ids-bounced';

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
      // One client connection: it prepared the statement once and believes it is there. Its name
      // is how the test finds PgBouncer's server connections (PgBouncer passes it on to them).
      const pool = new pg.Pool({
        connectionString: bouncer.url(db.url),
        max: 1,
        application_name: BOUNCED,
      });
      pool.on('error', () => undefined);
      const run = start(pool);
      try {
        await trickle(run, 10, 'before');
        // PgBouncer's server connections end (as a pooler recycles them); the new ones it opens
        // hold no prepared statement. Only those: the test's own writers (db.pool) and the
        // LISTEN connection are direct and stay (ending the writers' connections too failed a
        // write in CI, and an idle one's end was an uncaught error).
        const admin = new pg.Client({ connectionString: db.url });
        await admin.connect();
        try {
          const ended = await admin.query(
            `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = $1`,
            [BOUNCED],
          );
          expect(ended.rowCount).toBeGreaterThan(0);
        } finally {
          await admin.end();
        }
        await trickle(run, 30, 'after', false);
        // One: the calls by id run one at a time, and the first loss switches them all to a
        // text that is not prepared (the ended server connections may fail another statement or
        // two, differently).
        const lost = run.failures.filter((e) => e instanceof OutboxPoolerError);
        expect(lost.length, run.failures.map((e) => e.message).join('\n')).toBe(1);
        const first = run.byIds().findIndex((call) => call.failed);
        expect(first).toBeGreaterThanOrEqual(0);
        const after = run.byIds().slice(first + 1);
        expect(after.length).toBeGreaterThan(20);
        expect(after.filter((call) => !call.sent.includes('-- unprepared'))).toEqual([]);
        expect(after.filter((call) => call.failed)).toEqual([]);
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
