import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createDispatcher,
  fromPg,
  migrate,
  type Dispatcher,
  type Publisher,
} from '../../src/index.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { answers, startEmbeddedPostgres, type EmbeddedServer } from '../helpers/postgres-server.js';

/**
 * `asyncClaim` (sql/commit-mode.ts `claimCommitClause`) across a Postgres crash right after a
 * claim. The private server's WAL writer sleeps 10 s between flushes and autovacuum is off, so
 * nothing flushes the claim's commit before the crash: Postgres is crashed (a backend killed with
 * SIGKILL: the postmaster stops every process, drops shared memory and its WAL buffers, and runs
 * crash recovery) while dispatcher A's publish of the claimed message is still in flight. The
 * lease is gone after recovery; dispatcher B, started at once, must not publish the message
 * while A's publish runs (G3): the guard holds every asynchronous claim back for `leaseMs` after
 * the recovery. Then: nothing lost, at most one second publish.
 */
const LEASE_MS = 4_000;
/** How long A's publish of the claimed message stays in flight after the crash, well in its lease. */
const IN_FLIGHT_MS = 1_500;

let server: EmbeddedServer;
beforeAll(async () => {
  server = await startEmbeddedPostgres({
    flags: ['-c', 'wal_writer_delay=10000', '-c', 'autovacuum=off'],
  });
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  await migrate(fromPg(client), { engine: 'claims' });
  await client.end();
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

interface PublishEvent {
  who: 'A' | 'B';
  what: 'start' | 'end';
  id: string;
}

function newPool(): pg.Pool {
  const pool = new pg.Pool({ connectionString: server.url, max: 3 });
  // The crash ends every connection: idle ones report it here.
  pool.on('error', () => undefined);
  return pool;
}

describe('asynchronous claims across a Postgres crash', () => {
  it('a claim lost in the crash is not taken again while its publish may run: nothing lost, at most a second publish', async () => {
    const admin = newPool();
    const [message] = await enqueueCommitted(admin, manyMessages(1, 1));
    const events: PublishEvent[] = [];
    let crashed: Promise<void> | undefined;
    /** A's publisher: the first call crashes Postgres, then stays in flight for IN_FLIGHT_MS. */
    const publisherA: Publisher = {
      publish: async (messages) => {
        for (const m of messages) events.push({ who: 'A', what: 'start', id: m.id });
        if (!crashed) {
          crashed = (async () => {
            const victim = new pg.Client({ connectionString: server.url });
            victim.on('error', () => undefined);
            await victim.connect();
            const { rows } = await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
            process.kill(rows[0]!.pid, 'SIGKILL');
          })();
          await crashed;
          await new Promise((resolve) => setTimeout(resolve, IN_FLIGHT_MS));
        }
        for (const m of messages) events.push({ who: 'A', what: 'end', id: m.id });
        return messages.map(() => ({ status: 'published' as const }));
      },
    };
    const publisherB: Publisher = {
      publish: async (messages) => {
        for (const m of messages) events.push({ who: 'B', what: 'start', id: m.id });
        await new Promise((resolve) => setTimeout(resolve, 10));
        for (const m of messages) events.push({ who: 'B', what: 'end', id: m.id });
        return messages.map(() => ({ status: 'published' as const }));
      },
    };
    const options = { asyncClaim: true, leaseMs: LEASE_MS, pollIntervalMs: 50 } as const;
    const poolA = newPool();
    const poolB = newPool();
    const dispatchers: Dispatcher[] = [];
    try {
      const a = createDispatcher({ executor: fromPg(poolA), publisher: publisherA, ...options });
      dispatchers.push(a);
      a.start();
      // A new cluster counts as just recovered: A claims once its first leaseMs are over.
      await expect.poll(() => crashed !== undefined, { timeout: 30_000 }).toBe(true);
      await crashed;
      await expect.poll(() => answers(server.url), { timeout: 30_000, interval: 100 }).toBe(true);
      // The claim's commit never reached the disk: after recovery the message is not leased.
      const check = newPool();
      try {
        const { rows } = await check.query<{ lease_owner: string | null; attempts: number }>(
          'SELECT lease_owner, attempts FROM outbox WHERE message_id = $1',
          [message!.messageId],
        );
        expect(rows).toEqual([{ lease_owner: null, attempts: 0 }]);
      } finally {
        await check.end();
      }
      const b = createDispatcher({ executor: fromPg(poolB), publisher: publisherB, ...options });
      dispatchers.push(b);
      b.start();
      const pending = async () => {
        try {
          const { rows } = await poolB.query<{ n: number }>(
            'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL',
          );
          return rows[0]!.n;
        } catch {
          return -1; // a connection the crash ended
        }
      };
      await expect.poll(pending, { timeout: 60_000, interval: 200 }).toBe(0);
    } finally {
      for (const d of dispatchers) await d.stop();
      await poolA.end();
      await poolB.end();
      await admin.end();
    }
    const starts = events.filter((e) => e.what === 'start');
    // Nothing lost: published, and at most a second time after the crash.
    expect(starts.length).toBeGreaterThanOrEqual(1);
    expect(starts.length).toBeLessThanOrEqual(2);
    expect(starts.every((e) => e.id === message!.messageId)).toBe(true);
    // Never two publishes of it at the same time: every start follows the previous publish's end.
    let inFlight = 0;
    for (const e of events) {
      inFlight += e.what === 'start' ? 1 : -1;
      expect(inFlight).toBeLessThanOrEqual(1);
    }
  }, 120_000);
});
