import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../../src/core/message.js';
import {
  attemptsDistributionSql,
  lastErrorsSql,
  statusSql,
} from '../../../../src/sql/sqlite/admin.js';
import { claimHeadsSql, claimSql } from '../../../../src/sql/sqlite/claim.js';
import {
  createSqliteOutbox,
  migrateSqlite,
  openSqlite,
  readSqliteStatus,
  SqliteOutboxStore,
  type SqliteDatabase,
} from '../../../../src/stores/sqlite/index.js';

/**
 * A SQLite claim's cost follows its batch, not what piles up: 20,000 dispatched messages, and 300
 * aggregates blocked behind their head (backing off, dead under `hold`, in flight) with 9 messages
 * behind each. better-sqlite3 exposes no per-statement counter (no `sqlite3_stmt_status`, no scan
 * status), so two checks stand in for D1's `rows_read` (test/cloudflare/ordered-chains.test.ts
 * measures the same SQL on Miniflare):
 *
 * - the plan: every access to `outbox` is a SEARCH on an index, the heads from `outbox_ready_idx`,
 *   never a SCAN of the table, whatever its size;
 * - a counter: the claim the store sends, with a user-defined function `visit()` put in front of
 *   the WHERE of its heads scan and of each step of its runs — SQLite evaluates it for every row
 *   the index hands to the statement, before the other terms — runs in a transaction that is
 *   rolled back. The same counter in the claim's old shape (every pending row by due time, a head
 *   check each) counts the pile: the bound fails on a shape that grows.
 *
 * What a held snapshot does to Postgres and InnoDB (old row versions in the index) has no
 * counterpart here: SQLite's B-trees hold no dead entries; a reader held open in WAL mode keeps
 * the WAL from being checkpointed, which costs page lookups in the WAL index, not rows.
 */
const BATCH = 50;
const DUE = 200;
const BLOCKED = 300;
const PER = 10;
const HISTORY = 20_000;

const outbox = createSqliteOutbox();
const dirs: string[] = [];
const opened: SqliteDatabase[] = [];

async function openDb(): Promise<SqliteDatabase> {
  const dir = await mkdtemp(join(tmpdir(), 'agent-outbox-45b-bound-'));
  dirs.push(dir);
  const db = await openSqlite(join(dir, 'agent.db'));
  opened.push(db);
  migrateSqlite(db);
  return db;
}

function write(db: SqliteDatabase, messages: OutboxMessage[]): void {
  db.transaction(() => outbox.enqueue(db, messages)).immediate();
}
const heads = (prefix: string, n: number): OutboxMessage[] =>
  Array.from({ length: n }, (_, i) => ({
    topic: 'payment.charge',
    aggregateId: `${prefix}${i + 1}`,
    payload: { i },
  }));

/**
 * The claim before issue 16: every pending row by due time, a head check for each (`?1`, `?3`
 * selected so that the four parameters bind as for the claim).
 */
const naiveClaimSql = `
SELECT o.id, ?1, ?3 FROM outbox o
 WHERE visit(o.id)
   AND o.dispatched_at IS NULL
   AND o.dead_lettered_at IS NULL
   AND o.available_at <= ?2
   AND (o.lease_expires_at IS NULL OR o.lease_expires_at <= ?2)
   AND (o.ordered = 0 OR NOT EXISTS (
     SELECT 1 FROM outbox p
      WHERE p.aggregate_id = o.aggregate_id AND p.sequence < o.sequence
        AND p.dispatched_at IS NULL AND p.ordered = 1))
 ORDER BY o.available_at, o.id
 LIMIT ?4`;

/** `sql` with `visit()` in front of the heads scan and of each run step (see the file comment). */
function instrumented(sql: string): string {
  const counted = sql
    .replace('WHERE o.ready = 1', 'WHERE visit(o.id) AND o.ready = 1')
    .replace('WHERE r.depth < s.per_run', 'WHERE visit(n.id) AND r.depth < s.per_run');
  if (!counted.includes('visit(o.id)')) throw new Error('the heads scan was not instrumented');
  return counted;
}

/** Rows `sql` visits, run once in a rolled-back transaction, with what it claimed. */
function visits(db: SqliteDatabase, sql: string): { visited: number; claimed: number } {
  let visited = 0;
  // One argument (the row id): better-sqlite3 takes the arity from the function's length.
  (db as unknown as Database.Database).function(
    'visit',
    { deterministic: false },
    (_id: unknown) => {
      visited++;
      return 1;
    },
  );
  db.exec('BEGIN IMMEDIATE');
  try {
    const rows = db
      .prepare(sql)
      .all({ 1: 'bound#1', 2: Date.now(), 3: 60_000, 4: BATCH }) as unknown[];
    return { visited, claimed: rows.length };
  } finally {
    db.exec('ROLLBACK');
  }
}

function plan(db: SqliteDatabase, sql: string): string[] {
  return (
    db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all({ 1: 'p', 2: 0, 3: 0, 4: BATCH }) as {
      detail: string;
    }[]
  ).map((r) => r.detail);
}

let fresh: SqliteDatabase;
let piled: SqliteDatabase;

beforeAll(async () => {
  fresh = await openDb();
  write(fresh, heads('due-', DUE));

  piled = await openDb();
  const store = new SqliteOutboxStore(piled);
  // 20,000 messages written and dispatched through the store.
  for (let i = 0; i < HISTORY / 2_000; i++) write(piled, heads(`old-${i}-`, 2_000));
  for (let i = 0; ; i++) {
    const owner = `history#${i}`;
    const claimed = await store.claim({ owner, batchSize: 2_000, leaseMs: 60_000 });
    if (claimed.length === 0) break;
    await store.settle(
      owner,
      claimed.map((m) => ({ rowId: m.rowId, kind: 'published' })),
    );
  }
  // 300 aggregates of 10 messages, each head blocked through the store: a third backing off, a
  // third dead under `hold`, a third in flight (leased for an hour).
  write(
    piled,
    Array.from({ length: BLOCKED }, (_, a) =>
      Array.from({ length: PER }, (_, s) => ({
        topic: 'payment.charge',
        aggregateId: `blocked-${a + 1}`,
        payload: { s },
      })),
    ).flat(),
  );
  const claimed = await store.claim({ owner: 'blocked', batchSize: 1_000, leaseMs: 3_600_000 });
  const n = (m: { aggregateId: string }) => Number(m.aggregateId.slice('blocked-'.length));
  const blockedHeads = claimed.filter((m) => m.sequence === 1);
  expect(blockedHeads).toHaveLength(BLOCKED);
  await store.settle(
    'blocked',
    claimed
      .filter((m) => m.sequence !== 1 || n(m) <= 200)
      .map((m) =>
        m.sequence !== 1
          ? { rowId: m.rowId, kind: 'release' as const }
          : n(m) <= 100
            ? { rowId: m.rowId, kind: 'retry' as const, error: 'down', delayMs: 3_600_000 }
            : { rowId: m.rowId, kind: 'dead' as const, error: 'poison' },
      ),
    { deadLettersBlock: true },
  );
  write(piled, heads('due-', DUE));
}, 120_000);

afterAll(async () => {
  for (const db of opened) db.close();
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

describe('SQLite claim cost (better-sqlite3)', () => {
  it('plans every outbox access as an index SEARCH, the heads from outbox_ready_idx', () => {
    for (const sql of [claimSql, claimHeadsSql]) {
      const details = plan(piled, sql);
      expect(details.join('\n')).toMatch(/SEARCH o USING INDEX outbox_ready_idx/);
      // No full scan of the table under any alias (CTEs and subquery results may be scanned).
      expect(details.filter((d) => /^SCAN (o|p|n|outbox)\b/.test(d))).toEqual([]);
    }
  });

  it('visits about the same rows next to 20,000 dispatched and 3,000 blocked messages as without', () => {
    for (const sql of [claimSql, claimHeadsSql]) {
      const small = visits(fresh, instrumented(sql));
      const large = visits(piled, instrumented(sql));
      console.log('sqlite claim rows visited', {
        runs: sql === claimSql,
        small,
        large,
      });
      expect(small.claimed).toBe(BATCH);
      expect(large.claimed).toBe(BATCH);
      // The 100 heads in flight are in the ready index and visited, skipped, as on Postgres.
      expect(large.visited).toBeLessThanOrEqual(small.visited + 100 + 10);
      expect(large.visited).toBeLessThan(4 * BATCH + 100);
    }
    // The old shape visits the pile: the bound above fails on it.
    const naive = visits(piled, naiveClaimSql);
    console.log('sqlite naive claim rows visited', naive);
    expect(naive.visited).toBeGreaterThan(4 * BATCH + 100);
  });

  it('reads the status from the pending rows alone, each once, ordered and unordered', () => {
    write(
      piled,
      Array.from({ length: 7 }, (_, i) => ({
        topic: 'mail.send',
        aggregateId: `mail-${i}`,
        payload: { i },
        ordered: false,
      })),
    );
    for (const sql of [statusSql, attemptsDistributionSql, lastErrorsSql]) {
      const details = (
        piled.prepare(`EXPLAIN QUERY PLAN ${sql}`).all({ 1: 0 }) as { detail: string }[]
      ).map((r) => r.detail);
      const onOutbox = details.filter((d) => /\boutbox\b/.test(d));
      // Two reads of the table, one through each partial index; none without an index.
      expect(onOutbox).toHaveLength(2);
      expect(onOutbox.join('\n')).toMatch(/USING INDEX outbox_chain_idx/);
      expect(onOutbox.join('\n')).toMatch(/USING INDEX outbox_unordered_pending_idx/);
    }
    const status = readSqliteStatus(piled, { lastErrors: 500 });
    const truth = piled
      .prepare(
        `SELECT count(*) FILTER (WHERE dead_lettered_at IS NULL) AS backlog,
                count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) AS dead,
                count(*) FILTER (WHERE last_error IS NOT NULL) AS errors
           FROM outbox NOT INDEXED WHERE dispatched_at IS NULL`,
      )
      .get() as { backlog: number; dead: number; errors: number };
    // 300 blocked aggregates of 10 (100 of them dead at their head), 200 due heads, 7 mails.
    expect(truth).toEqual({ backlog: BLOCKED * PER - 100 + DUE + 7, dead: 100, errors: 200 });
    expect(status.backlog).toBe(truth.backlog);
    expect(status.deadLetters).toBe(truth.dead);
    expect(status.lastErrors).toHaveLength(truth.errors);
    expect(status.attempts.reduce((n, a) => n + a.messages, 0)).toBe(truth.backlog + truth.dead);
  });
});
