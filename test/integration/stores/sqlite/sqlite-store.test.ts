import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  createSqliteDispatcher,
  createSqliteOutbox,
  migrateSqlite,
  openSqlite,
  pruneSqliteOutbox,
  readSqliteStatus,
  type SqliteDatabase,
} from '../../../../src/stores/sqlite/index.js';
import { sqliteDriver } from '../../../helpers/libsql.js';
import { InMemoryPublisher } from '../../../../src/publishers/memory/in-memory-publisher.js';
import { createOutboxMetrics } from '../../../../src/metrics/outbox-metrics.js';

let dir: string;
let db: SqliteDatabase;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-outbox-sqlite-'));
  db = await openSqlite(`file:${join(dir, 'agent.db')}`, { driver: sqliteDriver() });
  migrateSqlite(db);
});
afterEach(async () => {
  db.close();
  await rm(dir, { recursive: true, force: true });
});

describe('the SQLite store', () => {
  it('opens the file in WAL mode with a busy timeout, and migrates once', () => {
    expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
    expect(Number(db.pragma('busy_timeout', { simple: true }))).toBeGreaterThan(0);
    expect(migrateSqlite(db).applied).toEqual([]);
  });

  it('writes a lone message only when asked, in a transaction of its own', () => {
    const outbox = createSqliteOutbox();
    const lone = outbox.enqueue(
      db,
      { topic: 'mail.send', aggregateId: 'a', payload: { n: 1 } },
      { allowAutocommit: true },
    );
    expect(lone).toMatchObject({ sequence: 1, deduped: false });
    expect(db.inTransaction).toBe(false);
    for (const [field, message] of [
      ['dedupeKey', { topic: 't', aggregateId: 'a', payload: 1, dedupeKey: 'k' }],
      ['requiresApproval', { topic: 't', aggregateId: 'a', payload: 1, requiresApproval: true }],
    ] as const)
      expect(() => db.transaction(() => outbox.enqueue(db, message)).immediate()).toThrow(
        new RegExp(`${field}: .*not supported by the SQLite outbox`),
      );
  });

  it('reports status, keeps unordered topics out of their aggregate, and prunes only what was dispatched', async () => {
    const outbox = createSqliteOutbox();
    db.transaction(() =>
      outbox.enqueue(db, [
        { topic: 'payment.charge', aggregateId: 'o', payload: 1 },
        { topic: 'audit.log', aggregateId: 'o', payload: 2 },
        { topic: 'payment.charge', aggregateId: 'o', payload: 3, delayMs: 3_600_000 },
      ]),
    ).immediate();
    expect(readSqliteStatus(db)).toMatchObject({ backlog: 3, dueNow: 2, scheduled: 1 });
    const publisher = new InMemoryPublisher();
    // Declared before the next write: audit.* is unordered from then on.
    createSqliteDispatcher({ database: db, publisher, unorderedTopics: ['audit.*'] });
    db.transaction(() =>
      outbox.enqueue(db, { topic: 'audit.log', aggregateId: 'o', payload: 4 }),
    ).immediate();
    await createSqliteDispatcher({ database: db, publisher }).drain();
    // The unordered audit message went out although the delayed charge holds the aggregate.
    expect(publisher.published.map((m) => m.payload)).toEqual(expect.arrayContaining([1, 2, 4]));
    expect(publisher.published).toHaveLength(3);
    expect(pruneSqliteOutbox(db, { olderThanMs: 0, now: () => Date.now() + 1_000 })).toBe(3);
    expect(readSqliteStatus(db)).toMatchObject({ backlog: 1, scheduled: 1 });
  });

  it('feeds the Prometheus gauges and counters from the file and its dispatcher', async () => {
    const outbox = createSqliteOutbox();
    db.transaction(() =>
      outbox.enqueue(db, [
        { topic: 'mail.send', aggregateId: 'm', payload: 1 },
        { topic: 'mail.send', aggregateId: 'm', payload: 2 },
      ]),
    ).immediate();
    const metrics = createOutboxMetrics({ readStatus: () => readSqliteStatus(db) });
    await metrics.refresh();
    expect(await metrics.registry.metrics()).toMatch(/^outbox_pending_messages 2$/m);
    const dispatcher = createSqliteDispatcher({ database: db, publisher: new InMemoryPublisher() });
    metrics.attach(dispatcher);
    await dispatcher.drain();
    await metrics.refresh();
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/^outbox_pending_messages 0$/m);
    expect(text).toMatch(/^outbox_messages_published_total\{[^}]*\} 2$/m);
  });
});
