import type mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimCandidatesSql } from '../../../../src/sql/mysql/claim.js';
import { NOW_MS } from '../../../../src/sql/mysql/clock.js';
import { firstPendingSql } from '../../../../src/sql/mysql/floor.js';
import { MysqlOutboxStore } from '../../../../src/stores/mysql/mysql-outbox-store.js';
import { analyzeStatement, type AnalyzedCost } from '../../../helpers/mysql-analyze.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../../helpers/mysql-database.js';

/**
 * A MySQL claim's cost follows its batch, not what piles up: dispatched history, aggregates
 * blocked behind a head (backing off, leased, dead under `hold`), or the delete-marked index
 * entries a REPEATABLE READ transaction held open on another connection keeps from purge. The
 * claim's locking SELECT — the statement the store sends — runs under MariaDB's
 * `ANALYZE FORMAT=JSON` in a transaction that is rolled back, and the rows its table accesses
 * handed on (`r_rows` × `r_loops`, the head probes included) and the InnoDB pages it touched
 * (`r_engine_stats.pages_accessed`) are compared between a small and a large pile.
 *
 * Each bound is checked against a shape that grows, in the same test: the claim as it was before
 * migration 3 (below) read every row queued behind a blocked head, on every claim.
 */
const up = await requireMysql();

const BATCH = 50;
const DUE = 200;

/** The claim before migration 3 (`parked`): every pending row in due order, heads kept. */
const naiveClaimSql = `
SELECT o.id
  FROM outbox o FORCE INDEX (outbox_claim_idx)
 WHERE o.dispatched_at IS NULL
   AND o.dead_lettered_at IS NULL
   AND o.available_at <= ${NOW_MS}
   AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ${NOW_MS})
   AND (o.ordered = 0
        OR o.sequence = coalesce((SELECT h.next_sequence FROM outbox_heads h
                                   WHERE h.aggregate_id = o.aggregate_id),
                                 (SELECT a.first_ordered_sequence FROM outbox_aggregates a
                                   WHERE a.aggregate_id = o.aggregate_id)))
 ORDER BY o.available_at, o.id
 LIMIT ?
 FOR UPDATE SKIP LOCKED`;

/**
 * Runs `sql` (the claim's SELECT by default, from `floor`: a store's `claimFloor`, 0 for none)
 * under ANALYZE in a rolled-back transaction.
 */
async function claimCost(
  db: MysqlTestDatabase,
  sql = claimCandidatesSql,
  floor = 0,
): Promise<AnalyzedCost & { why: string }> {
  const connection = await db.connect();
  try {
    await connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
    await connection.query("SET SESSION time_zone = '+00:00'");
    await connection.query('BEGIN');
    const values =
      sql === claimCandidatesSql ? [floor, BATCH] : sql === firstPendingSql ? [floor] : [BATCH];
    const cost = await analyzeStatement(connection, sql, values);
    await connection.query('ROLLBACK');
    return { ...cost, why: JSON.stringify(cost.tables) };
  } finally {
    await connection.end();
  }
}

/**
 * `count` messages on aggregates `${prefix}1..count`, `per` each (sequences 1..per), through the
 * insert trigger. `seq_1_to_n` is MariaDB's Sequence engine.
 */
async function insert(db: MysqlTestDatabase, prefix: string, count: number, per = 1) {
  await db.pool.query(
    `INSERT INTO outbox (aggregate_id, topic, payload)
     SELECT CONCAT(?, a.seq), 'payment.charge', '{}'
       FROM seq_1_to_${count} a, seq_1_to_${per} b
      ORDER BY a.seq, b.seq`,
    [prefix],
  );
}

let claims = 0;
/** Claims through the store and gives the leases back: what a dispatcher's claim does first. */
async function claimAndRelease(store: MysqlOutboxStore) {
  const owner = `bound#${++claims}`;
  const claimed = await store.claim({ owner, batchSize: BATCH, leaseMs: 60_000 });
  await store.release(
    owner,
    claimed.map((m) => m.rowId),
  );
  return claimed;
}

describe.runIf(up)('MySQL claim cost (MariaDB ANALYZE FORMAT=JSON)', () => {
  describe('(a) dispatched history', () => {
    let db: MysqlTestDatabase;
    beforeAll(async () => {
      db = await createMysqlTestDatabase({ prefix: 'b45b_bound_' });
    }, 60_000);
    afterAll(async () => db?.drop());

    it('reads the same rows next to 200 and 20,000 dispatched messages', async () => {
      const dispatch = (prefix: string) =>
        db.pool.query(
          `UPDATE outbox SET dispatched_at = ${NOW_MS} WHERE aggregate_id LIKE CONCAT(?, '%')`,
          [prefix],
        );
      await insert(db, 'old-', 200);
      await dispatch('old-');
      await insert(db, 'due-', DUE);
      const small = await claimCost(db);
      await insert(db, 'older-', 19_800);
      await dispatch('older-');
      const large = await claimCost(db);
      // The history shape, for the bound's sake: the primary key in id order walks it all.
      const naive = await claimCost(db, naiveClaimSql.replace('outbox_claim_idx', 'PRIMARY'));
      console.log('(a) rows/pages', { small, large, naive: naive.rowsRead });
      expect(large.rowsRead, large.why).toBeLessThanOrEqual(small.rowsRead + 10);
      expect(large.rowsRead, large.why).toBeLessThan(4 * BATCH);
      expect(large.pages, large.why).toBeLessThan(small.pages + 100);
      expect(naive.rowsRead).toBeGreaterThan(4 * BATCH);
    }, 120_000);
  });

  describe('(b) blocked aggregates', () => {
    let db: MysqlTestDatabase;
    let store: MysqlOutboxStore;
    const BLOCKED = 900;
    const PER = 10;
    beforeAll(async () => {
      db = await createMysqlTestDatabase({ prefix: 'b45b_bound_' });
      store = new MysqlOutboxStore(db.pool);
      // Written first: in due order, 9,000 rows behind blocked heads come before the due heads.
      // Blocked through the store, as a dispatcher would leave them: a third backing off (a
      // retry), a third dead under `hold`, a third with a head in flight (leased for an hour,
      // its first message published before).
      await insert(db, 'blocked-', BLOCKED, PER);
      const n = (m: { aggregateId: string }) => Number(m.aggregateId.slice('blocked-'.length));
      const middle = (m: { aggregateId: string }) => n(m) > 300 && n(m) <= 600;
      const round1 = await store.claim({ owner: 'setup#1', batchSize: 1_000, leaseMs: 60_000 });
      await store.settle(
        'setup#1',
        round1.map((m) => ({ rowId: m.rowId, kind: middle(m) ? 'published' : 'release' })),
      );
      const round2 = await store.claim({ owner: 'setup#2', batchSize: 1_000, leaseMs: 3_600_000 });
      expect(round2).toHaveLength(BLOCKED);
      await store.settle(
        'setup#2',
        round2
          .filter((m) => !middle(m))
          .map((m) =>
            n(m) <= 300
              ? { rowId: m.rowId, kind: 'retry', error: 'broker down', delayMs: 3_600_000 }
              : { rowId: m.rowId, kind: 'dead', error: 'poison' },
          ),
      );
      await insert(db, 'due-', DUE);
    }, 120_000);
    afterAll(async () => db?.drop());

    it('claims only due heads, and once seen, the rows behind blocked heads are not read again', async () => {
      const naive = await claimCost(db, naiveClaimSql);
      const first = await claimAndRelease(store);
      // Claims park what they find behind a blocked head (a bounded amount per claim).
      for (let i = 0; i < 20; i++) await claimAndRelease(store);
      const claimed = await claimAndRelease(store);
      const after = await claimCost(db);
      console.log('(b) rows/pages', { naive, first: first.length, after });
      expect(claimed.map((m) => m.aggregateId.replace(/\d+$/, ''))).toEqual(
        Array.from({ length: BATCH }, () => 'due-'),
      );
      // The 300 heads leased elsewhere (in flight) are read and skipped, as on Postgres.
      expect(after.rowsRead, after.why).toBeLessThan(4 * BATCH + 300);
      // The bound fails on the old shape: it read the ~7,800 rows behind the blocked heads and
      // probed a head for each, ~16,300 rows.
      expect(naive.rowsRead).toBeGreaterThan(4 * BATCH);
    }, 120_000);

    it('a parked row is claimed once its head is settled, in order', async () => {
      const rowOf = async (aggregate: string, sequence: number) => {
        const [rows] = await db.pool.query(
          'SELECT id, parked FROM outbox WHERE aggregate_id = ? AND sequence = ?',
          [aggregate, sequence],
        );
        return (rows as { id: number; parked: number }[])[0]!;
      };
      // Parked by the claims above.
      expect((await rowOf('blocked-1', 2)).parked).toBe(1);
      expect((await rowOf('blocked-301', 3)).parked).toBe(1);
      // The head in flight is published by its owner; the backing-off head comes due.
      const leased = await rowOf('blocked-301', 2);
      await store.settle('setup#2', [{ rowId: String(leased.id), kind: 'published' }]);
      expect((await rowOf('blocked-301', 3)).parked).toBe(0);
      await db.pool.query(
        `UPDATE outbox SET available_at = ${NOW_MS} WHERE aggregate_id = 'blocked-1' AND sequence = 1`,
      );
      // Everything of the due heads is leased away, so what is claimable is these two chains.
      await db.pool.query(
        `UPDATE outbox SET lease_owner = 'x', lease_expires_at = ${NOW_MS} + 3600000
          WHERE aggregate_id LIKE 'due-%'`,
      );
      const seen: string[] = [];
      for (let i = 0; i < 30; i++) {
        const owner = `order#${i}`;
        const claimed = await store.claim({ owner, batchSize: BATCH, leaseMs: 60_000 });
        if (claimed.length === 0) break;
        seen.push(...claimed.map((m) => `${m.aggregateId}#${m.sequence}`));
        await store.settle(
          owner,
          claimed.map((m) => ({ rowId: m.rowId, kind: 'published' })),
        );
      }
      const of = (aggregate: string) => seen.filter((s) => s.startsWith(`${aggregate}#`));
      expect(of('blocked-301')).toEqual(
        Array.from({ length: PER - 2 }, (_, i) => `blocked-301#${i + 3}`),
      );
      expect(of('blocked-1')).toEqual(Array.from({ length: PER }, (_, i) => `blocked-1#${i + 1}`));
      expect(seen).toHaveLength(2 * PER - 2);
    }, 120_000);
  });

  describe('(c) a REPEATABLE READ snapshot held open while 5,000 messages are dispatched', () => {
    let db: MysqlTestDatabase;
    let holder: mysql.Connection | undefined;
    let fresh: AnalyzedCost & { why: string };
    let held: AnalyzedCost & { why: string };
    let walked: AnalyzedCost & { why: string };
    let firstKey: AnalyzedCost & { why: string };
    let firstWalk: AnalyzedCost & { why: string };
    let floor = 0;
    let historyKey = 0;
    beforeAll(async () => {
      // The baseline: the same 200 due heads in a database of their own.
      const other = await createMysqlTestDatabase({ prefix: 'b45b_bound_' });
      try {
        await insert(other, 'due-', DUE);
        fresh = await claimCost(other);
      } finally {
        await other.drop();
      }
      db = await createMysqlTestDatabase({ prefix: 'b45b_bound_' });
      const store = new MysqlOutboxStore(db.pool);
      holder = await db.connect();
      await holder.query('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await holder.query('START TRANSACTION WITH CONSISTENT SNAPSHOT');
      await holder.query('SELECT COUNT(*) FROM outbox');
      // 5,000 messages (10 on each of 500 aggregates) claimed, leased and published through the
      // store: each leaves delete-marked entries in outbox_claim_idx that purge may not remove.
      await insert(db, 'hist-', 500, 10);
      for (let i = 0; i < 200; i++) {
        const owner = `hist#${i}`;
        const claimed = await store.claim({ owner, batchSize: 500, leaseMs: 60_000 });
        if (claimed.length === 0) break;
        await store.settle(
          owner,
          claimed.map((m) => ({ rowId: m.rowId, kind: 'published' })),
        );
      }
      const [[left]] = (await db.pool.query(
        'SELECT COUNT(*) AS n FROM outbox WHERE dispatched_at IS NULL',
      )) as unknown as [{ n: number }[]];
      expect(Number(left!.n)).toBe(0);
      const [[history]] = (await db.pool.query(
        "SELECT MAX(available_at) AS k FROM outbox WHERE aggregate_id LIKE 'hist-%'",
      )) as unknown as [{ k: number }[]];
      historyKey = Number(history!.k);
      // Written after the history: in due order, the history's dead index entries come first.
      await insert(db, 'due-', DUE);
      // Claims move the store's floor up to the first pending key (a due row's), but never past
      // SAFE (src/sql/mysql/floor.ts): the server's now less FLOOR_MARGIN_MS, and the start of any
      // statement still running or transaction that wrote still open on the server — other
      // tests' too. Claims run until the floor passes the history: waiting for a state, not
      // timing anything (a loaded machine waits longer; a floor that never moves fails below).
      for (let i = 0; i < 240 && store.claimFloor <= historyKey; i++) {
        await claimAndRelease(store);
        if (store.claimFloor <= historyKey)
          await new Promise((resolve) => setTimeout(resolve, 500));
      }
      floor = store.claimFloor;
      held = await claimCost(db, claimCandidatesSql, floor);
      // The same claim without a floor (what a store without the PROCESS privilege runs).
      walked = await claimCost(db, claimCandidatesSql, 0);
      // The floor's own read of the first pending key (floor.ts), from the floor.
      firstKey = await claimCost(db, firstPendingSql, floor);
      firstWalk = await claimCost(db, firstPendingSql, 0);
      console.log('(c) rows/pages', { fresh, held, walked, firstKey, firstWalk, floor });
    }, 300_000);
    afterAll(async () => {
      await holder?.end();
      await db?.drop();
    });

    it('the rows a claim reads stay those of its batch', () => {
      expect(held.rowsRead, held.why).toBeLessThanOrEqual(fresh.rowsRead + 10);
    });

    // The claim's scan starts at the store's floor (src/sql/mysql/floor.ts), above the keys of
    // the delete-marked entries of every message dispatched since the snapshot was taken, which
    // InnoDB's purge cannot remove while it is open — about 2 page accesses each. Without the
    // floor (`walked`) the claim steps over them all: measured 101 → ~10,100 for 5,000 messages.
    it('the pages a claim touches do not grow with what the snapshot keeps', () => {
      expect(floor, 'the floor never passed the dispatched history').toBeGreaterThan(historyKey);
      expect(held.pages, held.why).toBeLessThan(3 * fresh.pages);
      // What the floor saves, so that the bound above cannot pass for another reason.
      expect(walked.pages, walked.why).toBeGreaterThan(10 * fresh.pages);
    });

    // The floor's own read of the first pending key (floor.ts) is a consistent read of the
    // index alone: it steps over dead entries without the clustered-index visit per entry that
    // the claim's locking read makes (measured from 0: ~16 pages for the 10,000 dead entries,
    // against the claim's ~19,000). From the floor it is one descent.
    it('the floor’s read of the first pending key is one short range read from the floor', () => {
      expect(firstKey.rowsRead, firstKey.why).toBe(1);
      expect(firstWalk.rowsRead, firstWalk.why).toBe(1);
      expect(firstKey.pages, firstKey.why).toBeLessThan(firstWalk.pages);
      expect(firstKey.pages, firstKey.why).toBeLessThan(10);
    });
  });
});
