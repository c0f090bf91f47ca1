import { createServer, type Server } from 'node:http';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpReceiver } from '../../../src/consumer/bindings/http.js';
import { createConsumer, createLedger, pgTransactions } from '../../../src/consumer/index.js';
import { createOutbox, fromPg } from '../../../src/index.js';
import { dispatchArgs, startCli, type CliProcess } from '../../helpers/cli-process.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { requirePgBouncer, startPgBouncer, type PgBouncer } from '../../helpers/pgbouncer.js';

/**
 * Issue 41: the whole path through PgBouncer 1.18 in transaction mode, 4 server connections, with
 * nothing but the documented options — the writer with `preparedStatements: false`, two
 * `outbox dispatch --no-listen` processes that also run retention every 2 s, and a consumer whose
 * ledger (and strict per-aggregate order) goes through the pooler too. Before this issue a
 * retention run left its session-level advisory lock on a pooled server connection, and every
 * later run found it taken.
 */
const runs = requirePgBouncer();

const AGGREGATES = 20;
const PER_AGGREGATE = 20;
const TOTAL = AGGREGATES * PER_AGGREGATE;

let db: TestDatabase;
let bouncer: PgBouncer;
let pooled: pg.Pool;
let server: Server;
let consumerUrl: string;
const dispatchers: CliProcess[] = [];

beforeAll(async () => {
  if (!runs) return;
  db = await createTestDatabase();
  await db.pool.query(
    'CREATE TABLE effects (id bigserial PRIMARY KEY, message_id text NOT NULL, aggregate_id text NOT NULL, sequence int NOT NULL)',
  );
  bouncer = await startPgBouncer(db.url);
  pooled = new pg.Pool({ connectionString: bouncer.url(db.url), max: 6 });
  pooled.on('error', () => undefined);
  const consumer = createConsumer({
    name: 'charges',
    mode: 'transactional',
    ledger: createLedger({ runner: pgTransactions(pooled, { preparedStatements: false }) }),
    ordering: { topics: ['payment.charge'], check: 'strict', earlyRetryDelayMs: 100 },
    retry: { baseMs: 50, maxMs: 200, jitterMs: 0 },
    handler: async (message, { tx }) => {
      await tx.query(
        'INSERT INTO effects (message_id, aggregate_id, sequence) VALUES ($1, $2, $3)',
        [message.id, message.aggregateId, message.sequence],
      );
    },
  });
  server = createServer(createHttpReceiver(consumer));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  consumerUrl = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/`;
});

afterAll(async () => {
  if (!runs) return;
  for (const d of dispatchers) if (d.child.exitCode === null) d.child.kill('SIGKILL');
  await new Promise((resolve) => server?.close(resolve));
  await pooled?.end();
  await bouncer?.stop();
  await db?.drop();
});

const one = async <T>(sql: string, values: unknown[] = []): Promise<T> =>
  (await db.pool.query(sql, values)).rows[0] as T;

/** Advisory locks held by any session on the test database (PgBouncer's server connections). */
const advisoryLocks = async () =>
  (
    await one<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
        WHERE l.locktype = 'advisory' AND d.datname = $1`,
      [db.name],
    )
  ).n;

/** One business transaction through the pooler: `messages` of one aggregate, committed. */
async function write(aggregate: number, from: number, count: number): Promise<void> {
  const outbox = createOutbox();
  const client = await pooled.connect();
  try {
    await client.query('BEGIN');
    await outbox.enqueue(
      fromPg(client, { preparedStatements: false }),
      Array.from({ length: count }, (_, i) => ({
        topic: 'payment.charge',
        aggregateId: `agg-${aggregate}`,
        payload: { n: from + i },
      })),
    );
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw error;
  } finally {
    client.release();
  }
}

describe.runIf(runs)('through PgBouncer in transaction mode (issue 41)', () => {
  it('writer, two dispatchers with retention, consumer: every effect once, in order, retention done, no lock left', async () => {
    const args = dispatchArgs(
      bouncer.url(db.url),
      consumerUrl,
      '--no-listen',
      '--prune-older-than',
      '1s',
      '--prune-interval',
      '2s',
    );
    dispatchers.push(startCli(args), startCli(args));
    // Written while both dispatchers run: 4 writers, 5 transactions of 4 messages per aggregate.
    const batches: [number, number][] = [];
    for (let from = 0; from < PER_AGGREGATE; from += 4)
      for (let a = 0; a < AGGREGATES; a++) batches.push([a, from]);
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let next = batches.shift(); next; next = batches.shift())
          await write(next[0], next[1], 4);
      }),
    );

    await expect
      .poll(async () => (await one<{ n: number }>('SELECT count(*)::int AS n FROM effects')).n, {
        timeout: 120_000,
        interval: 500,
      })
      .toBe(TOTAL);
    // Retention: every dispatched message gone from the outbox and its dispatched log.
    await expect
      .poll(
        async () => (await one<{ n: number }>('SELECT count(*)::int AS n FROM outbox_messages')).n,
        { timeout: 60_000, interval: 500 },
      )
      .toBe(0);

    // Each message pruned exactly once, by one dispatcher or the other (a run logs when it ends).
    const output = () => dispatchers.map((d) => d.output()).join('\n');
    const removed = () =>
      [...output().matchAll(/retention run removed=(\d+)/g)].reduce(
        (sum, m) => sum + Number(m[1]),
        0,
      );
    await expect.poll(removed, { timeout: 30_000, interval: 500 }).toBeGreaterThanOrEqual(TOTAL);
    for (const d of dispatchers) d.child.kill('SIGTERM');
    expect(await Promise.all(dispatchers.map((d) => d.exited))).toEqual([0, 0]);
    expect(removed()).toBe(TOTAL);
    expect(output()).not.toMatch(/retention run failed|prepared statement/);

    // Once each, and in each aggregate's order.
    const effects = (
      await db.pool.query<{ aggregate_id: string; sequence: number; n: number }>(
        `SELECT aggregate_id, sequence, count(*) OVER (PARTITION BY message_id)::int AS n
           FROM effects ORDER BY id`,
      )
    ).rows;
    expect(effects.every((e) => e.n === 1)).toBe(true);
    const last = new Map<string, number>();
    for (const e of effects) {
      expect(e.sequence).toBe((last.get(e.aggregate_id) ?? 0) + 1);
      last.set(e.aggregate_id, e.sequence);
    }
    expect(last.size).toBe(AGGREGATES);
    expect(
      (
        await one<{ n: number }>(
          `SELECT count(*)::int AS n FROM processed_messages WHERE consumer = 'charges' AND state = 'done'`,
        )
      ).n,
    ).toBe(TOTAL);

    // PgBouncer still holds its server connections: none of them kept a lock.
    expect(await advisoryLocks()).toBe(0);
  }, 300_000);
});
