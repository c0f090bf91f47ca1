import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InMemoryPublisher } from '../../../../src/publishers/memory/in-memory-publisher.js';
import {
  createSqliteDispatcher,
  createSqliteOutbox,
  migrateSqlite,
  openSqlite,
  type SqliteDatabase,
} from '../../../../src/stores/sqlite/index.js';
import { sqliteDriver } from '../../../helpers/libsql.js';

/**
 * A plain SQL `INSERT INTO outbox (aggregate_id, topic, payload[, headers])`, as another language
 * or a database tool writes it, is a message (migration 3's trigger, src/sql/sqlite/schema.ts).
 */
let dir: string;
let path: string;
let db: SqliteDatabase;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-outbox-sqlite-plain-'));
  path = join(dir, 'agent.db');
  db = await openSqlite(path, { driver: sqliteDriver() });
  migrateSqlite(db);
  db.exec('CREATE TABLE orders (id TEXT PRIMARY KEY)');
});
afterEach(async () => {
  db.close();
  await rm(dir, { recursive: true, force: true });
});

const PLAIN = 'INSERT INTO outbox (aggregate_id, topic, payload) VALUES (?, ?, ?)';
const rows = () =>
  db
    .prepare(
      'SELECT message_id, aggregate_id, topic, payload, headers, sequence, attempts, ordered FROM outbox ORDER BY id',
    )
    .all() as {
    message_id: string;
    aggregate_id: string;
    topic: string;
    payload: string;
    headers: string;
    sequence: number;
    attempts: number;
    ordered: number;
  }[];
const counter = (aggregateId: string) =>
  (
    db
      .prepare('SELECT last_sequence FROM outbox_aggregates WHERE aggregate_id = ?')
      .get(aggregateId) as { last_sequence: number } | undefined
  )?.last_sequence;

describe('a plain SQL INSERT INTO outbox on SQLite', () => {
  it('is a message of the business transaction: id, sequence and defaults filled in, then published', async () => {
    const outbox = createSqliteOutbox();
    db.transaction(() => {
      db.prepare('INSERT INTO orders (id) VALUES (?)').run('42');
      db.prepare(PLAIN).run('order:42', 'payment.charge', JSON.stringify({ amount: 1200 }));
      outbox.enqueue(db, { topic: 'mail.send', aggregateId: 'order:42', payload: { to: 'a' } });
      db.prepare(
        'INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES (?, ?, ?, ?)',
      ).run('order:42', 'audit.log', '"done"', JSON.stringify({ source: 'sql' }));
    }).immediate();
    const written = rows();
    expect(written.map((r) => [r.topic, r.sequence, r.attempts, r.ordered])).toEqual([
      ['payment.charge', 1, 0, 1],
      ['mail.send', 2, 0, 1],
      ['audit.log', 3, 0, 1],
    ]);
    // A UUIDv7, like the writers' ids; headers default to an empty object.
    expect(written[0]!.message_id).toMatch(
      /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/,
    );
    expect(new Set(written.map((r) => r.message_id)).size).toBe(3);
    expect(written[0]!.headers).toBe('{}');
    const publisher = new InMemoryPublisher();
    await createSqliteDispatcher({ database: db, publisher }).drain();
    expect(publisher.published.map((m) => [m.topic, m.sequence, m.payload, m.headers])).toEqual([
      ['payment.charge', 1, { amount: 1200 }, {}],
      ['mail.send', 2, { to: 'a' }, expect.objectContaining({})],
      ['audit.log', 3, 'done', { source: 'sql' }],
    ]);
    expect(publisher.published[0]!.id).toBe(written[0]!.message_id);
  });

  it('follows the unordered topics, and leaves nothing (not even a sequence) when rolled back', () => {
    createSqliteDispatcher({
      database: db,
      publisher: new InMemoryPublisher(),
      unorderedTopics: ['audit.*'],
    });
    expect(() =>
      db.transaction(() => {
        db.prepare(PLAIN).run('order:7', 'payment.charge', '1');
        throw new Error('the business step failed');
      })(),
    ).toThrow('the business step failed');
    expect(rows()).toEqual([]);
    expect(counter('order:7')).toBeUndefined();
    db.prepare(PLAIN).run('order:7', 'audit.log', '2');
    expect(rows().map((r) => [r.sequence, r.ordered])).toEqual([[1, 0]]);
  });

  it('refuses bad input with an error that names the column, and writes nothing', () => {
    const bad: [unknown[], RegExp][] = [
      [['order:1', null, '1'], /needs topic, a text of 1 to 255 characters/],
      [['order:1', '', '1'], /needs topic/],
      [['order:1', 'x'.repeat(256), '1'], /needs topic/],
      [[null, 'payment.charge', '1'], /needs aggregate_id/],
      [['order:1', 'payment.charge', null], /needs payload, a JSON text/],
      [['order:1', 'payment.charge', '{not json'], /needs payload, a JSON text/],
    ];
    db.exec('BEGIN IMMEDIATE');
    for (const [values, error] of bad)
      expect(() => db.prepare(PLAIN).run(...values)).toThrow(error);
    for (const headers of ['[1]', '{"attempt":1}', 'not json'])
      expect(() =>
        db
          .prepare('INSERT INTO outbox (aggregate_id, topic, payload, headers) VALUES (?, ?, ?, ?)')
          .run('order:1', 'payment.charge', '1', headers),
      ).toThrow(/headers must be a JSON object of string values/);
    // Each refused statement wrote nothing; the transaction is still the caller's to finish.
    expect(db.inTransaction).toBe(true);
    db.exec('COMMIT');
    expect(rows()).toEqual([]);
    expect(counter('order:1')).toBeUndefined();
  });

  // Not on libsql: its statement that failed with SQLITE_BUSY_SNAPSHOT keeps the stale snapshot
  // after ROLLBACK (until it runs again), so `other` cannot BEGIN IMMEDIATE below (docs/sqlite.md).
  it.skipIf(sqliteDriver() === 'libsql')(
    'numbers each aggregate in commit order: a writer that read before another committed cannot insert',
    async () => {
      const other = await openSqlite(path, { busyTimeoutMs: 0, driver: sqliteDriver() });
      try {
        // `other` starts first, as a deferred transaction that reads: its snapshot predates db's.
        other.exec('BEGIN');
        other.prepare('SELECT count(*) FROM outbox').get();
        db.exec('BEGIN IMMEDIATE');
        db.prepare(PLAIN).run('order:9', 'payment.charge', '"first to commit"');
        expect(() => other.prepare(PLAIN).run('order:9', 'payment.charge', '"stale"')).toThrow(
          /locked|busy/i,
        );
        db.exec('COMMIT');
        // Still on its old snapshot, it may not write at all: its sequence could only be stale.
        expect(() => other.prepare(PLAIN).run('order:9', 'payment.charge', '"stale"')).toThrow(
          /locked|busy/i,
        );
        other.exec('ROLLBACK');
        other.exec('BEGIN IMMEDIATE');
        other.prepare(PLAIN).run('order:9', 'payment.charge', '"second to commit"');
        other.exec('COMMIT');
      } finally {
        other.close();
      }
      expect(rows().map((r) => [r.sequence, JSON.parse(r.payload) as string])).toEqual([
        [1, 'first to commit'],
        [2, 'second to commit'],
      ]);
    },
  );

  it('numbers each aggregate in commit order across processes writing at once', async () => {
    // Each process commits 100 transactions: a plain INSERT of the aggregate's next message and a
    // row in `commits`, whose AUTOINCREMENT id records the order in which the transactions wrote.
    db.exec('CREATE TABLE commits (id INTEGER PRIMARY KEY AUTOINCREMENT, message TEXT NOT NULL)');
    const betterSqlite = createRequire(import.meta.url).resolve('better-sqlite3');
    const child = (name: string) =>
      new Promise<void>((resolve, reject) => {
        const script = `
          const Database = require(${JSON.stringify(betterSqlite)});
          const db = new Database(${JSON.stringify(path)}, { timeout: 30000 });
          const insert = db.prepare('INSERT INTO outbox (aggregate_id, topic, payload) VALUES (?, ?, ?)');
          const log = db.prepare('INSERT INTO commits (message) VALUES (?)');
          for (let i = 0; i < 100; i++) {
            const payload = JSON.stringify('${name}-' + i);
            db.transaction(() => { insert.run('hot', 'payment.charge', payload); log.run(payload); }).immediate();
          }
          db.close();`;
        const proc = spawn(process.execPath, ['-e', script], { stdio: 'inherit' });
        proc.on('error', reject);
        proc.on('exit', (code) =>
          code === 0 ? resolve() : reject(new Error(`${name} exited ${String(code)}`)),
        );
      });
    await Promise.all([child('a'), child('b')]);
    const bySequence = rows().map((r) => r.payload);
    const byCommit = (
      db.prepare('SELECT message FROM commits ORDER BY id').all() as { message: string }[]
    ).map((r) => r.message);
    expect(bySequence).toHaveLength(200);
    expect(rows().map((r) => r.sequence)).toEqual(Array.from({ length: 200 }, (_, i) => i + 1));
    expect(bySequence).toEqual(byCommit);
  });
});
