import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPg } from '../../../src/store/from-pg.js';
import { previewPrune, pruneOutbox } from '../../../src/retention/prune-outbox.js';
import { createRetentionJob, poolSessions } from '../../../src/retention/retention-job.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { countKinds, generateOutboxRows } from '../../fixtures/ops/generate-rows.js';
import { runOps } from '../../fixtures/ops/run-ops-cli.js';

const DAY = 86_400_000;

describe('retention on 1,000,000 rows', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  }, 300_000);
  afterAll(() => db.drop());

  it(
    'deletes only old dispatched rows, in batches of at most --batch-size',
    { timeout: 300_000 },
    async () => {
      const generated = await generateOutboxRows(db.pool, 1_000_000);
      const before = await countKinds(db.pool);
      expect(before).toEqual({
        pending: generated.pending,
        dead: generated.dead,
        recentDispatched: generated.recentDispatched,
        oldDispatched: generated.oldDispatched,
      });
      const pendingIds = await db.pool.query<{ s: string }>(
        `SELECT sum(id)::text AS s FROM outbox WHERE dispatched_at IS NULL`,
      );

      const batchSize = 5_000;
      const batchRows: number[] = [];
      const result = await pruneOutbox(fromPg(db.pool), {
        olderThanMs: 30 * DAY,
        batchSize,
        onBatch: (p) => batchRows.push(p.lastBatch),
      });

      // Every batch bounded; the number of batches is what bounded batches must take.
      expect(Math.max(...batchRows)).toBeLessThanOrEqual(batchSize);
      expect(batchRows.length).toBe(Math.floor(generated.oldDispatched / batchSize) + 1);
      expect(batchRows.reduce((a, b) => a + b, 0)).toBe(generated.oldDispatched);
      expect(result.removed).toBe(generated.oldDispatched);

      const after = await countKinds(db.pool);
      expect(after).toEqual({
        pending: generated.pending,
        dead: generated.dead,
        recentDispatched: generated.recentDispatched,
        oldDispatched: 0,
      });
      // The very same pending rows, not merely as many.
      const pendingAfter = await db.pool.query<{ s: string }>(
        `SELECT sum(id)::text AS s FROM outbox WHERE dispatched_at IS NULL`,
      );
      expect(pendingAfter.rows[0]!.s).toBe(pendingIds.rows[0]!.s);
      const { rows: total } = await db.pool.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM outbox',
      );
      expect(total[0]!.n).toBe(generated.total - generated.oldDispatched);
    },
  );
});

describe('retention modes', () => {
  let db: TestDatabase;
  let generated: Awaited<ReturnType<typeof generateOutboxRows>>;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('--dry-run counts and changes nothing', async () => {
    generated = await generateOutboxRows(db.pool, 20_000);
    const preview = await previewPrune(fromPg(db.pool), { olderThanMs: 30 * DAY });
    expect(preview.outboxRows).toBe(generated.oldDispatched);

    const cli = await runOps(
      ['prune', '--older-than', '30d', '--dry-run', '--ledger-older-than', '14d'],
      { DATABASE_URL: db.url },
    );
    expect(cli.stderr).toBe('');
    expect(cli.code).toBe(0);
    expect(cli.stdout).toContain(
      `would delete ${generated.oldDispatched} dispatched rows older than 30d`,
    );
    expect(cli.stdout).toContain('would delete 0 ledger rows older than 14d');
    expect((await countKinds(db.pool)).oldDispatched).toBe(generated.oldDispatched);
  });

  it('maxBatches stops after that many committed batches; the next run continues', async () => {
    const first = await pruneOutbox(fromPg(db.pool), {
      olderThanMs: 30 * DAY,
      batchSize: 1000,
      maxBatches: 3,
    });
    expect(first).toEqual({ removed: 3000, batches: 3, archived: false });
    expect((await countKinds(db.pool)).oldDispatched).toBe(generated.oldDispatched - 3000);
  });

  it('--archive moves the rows to outbox_archive, with their columns', async () => {
    const sample = await db.pool.query<{ id: string; message_id: string; payload: unknown }>(
      `SELECT id::text, message_id::text, payload FROM outbox
        WHERE dispatched_at < now() - interval '30 days' ORDER BY dispatched_at LIMIT 1`,
    );
    const remaining = generated.oldDispatched - 3000;
    const cli = await runOps(
      ['prune', '--older-than', '30d', '--archive', '--batch-size', '700', '--json'],
      { DATABASE_URL: db.url },
    );
    expect(cli.code).toBe(0);
    const result = JSON.parse(cli.stdout) as { outbox: { removed: number; batches: number } };
    expect(result.outbox.removed).toBe(remaining);
    expect(result.outbox.batches).toBe(Math.floor(remaining / 700) + 1);
    expect(cli.stderr).toMatch(/outbox: \d+ rows archived in \d+ batches/);

    const after = await countKinds(db.pool);
    expect(after).toEqual({
      pending: generated.pending,
      dead: generated.dead,
      recentDispatched: generated.recentDispatched,
      oldDispatched: 0,
    });
    const archived = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM outbox_archive',
    );
    expect(archived.rows[0]!.n).toBe(remaining);
    const row = await db.pool.query<{ message_id: string; payload: unknown; archived_at: Date }>(
      'SELECT message_id::text, payload, archived_at FROM outbox_archive WHERE id = $1',
      [sample.rows[0]!.id],
    );
    expect(row.rows[0]).toMatchObject({
      message_id: sample.rows[0]!.message_id,
      payload: sample.rows[0]!.payload,
    });
  });

  it('outbox prune deletes the dedupe keys whose window ended and keeps the live ones; --dry-run counts them', async () => {
    await db.pool.query(
      `INSERT INTO outbox (aggregate_id, topic, payload, dedupe_key)
       VALUES ('dedupe:1', 'payment.charge', '{}', 'charge:old'),
              ('dedupe:2', 'payment.charge', '{}', 'charge:live')`,
    );
    await db.pool.query(
      `UPDATE outbox_dedupe_keys SET expires_at = now() - interval '1 second'
        WHERE dedupe_key = 'charge:old'`,
    );
    const dry = await runOps(['prune', '--older-than', '30d', '--dry-run', '--json'], {
      DATABASE_URL: db.url,
    });
    expect(dry.code, dry.stderr).toBe(0);
    expect(JSON.parse(dry.stdout)).toMatchObject({ dryRun: true, dedupeKeys: 1 });
    const keys = async () =>
      (
        await db.pool.query<{ dedupe_key: string }>(
          `SELECT dedupe_key FROM outbox_dedupe_keys ORDER BY dedupe_key`,
        )
      ).rows.map((r) => r.dedupe_key);
    expect(await keys()).toEqual(['charge:live', 'charge:old']);
    // After the archive test: no old dispatched rows are left, so the run is about the keys.
    const run = await runOps(['prune', '--older-than', '30d', '--json'], {
      DATABASE_URL: db.url,
    });
    expect(run.code, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ dedupeKeys: { removed: 1, batches: 1 } });
    expect(run.stderr).toMatch(/dedupe keys: 1 expired keys deleted in 1 batches/);
    expect(await keys()).toEqual(['charge:live']);
  });

  it('--archive keeps the dedupe key and the approval deadline policy (migration 017)', async () => {
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO outbox (aggregate_id, topic, payload, dedupe_key)
       VALUES ('audit:1', 'payment.charge', '{}', 'charge:audit') RETURNING id::text`,
    );
    await db.pool.query(
      `UPDATE outbox SET dispatched_at = now() - interval '40 days', approval_on_expiry = 'approve',
              approval_expires_at = now() - interval '41 days'
        WHERE id = $1`,
      [rows[0]!.id],
    );
    const cli = await runOps(['prune', '--older-than', '30d', '--archive', '--json'], {
      DATABASE_URL: db.url,
    });
    expect(cli.code, cli.stderr).toBe(0);
    const archived = await db.pool.query(
      `SELECT dedupe_key, approval_on_expiry, approval_expires_at IS NOT NULL AS has_deadline
         FROM outbox_archive WHERE id = $1`,
      [rows[0]!.id],
    );
    expect(archived.rows).toEqual([
      { dedupe_key: 'charge:audit', approval_on_expiry: 'approve', has_deadline: true },
    ]);
  });

  it('bad flags are usage errors (exit 2) before touching the database', async () => {
    const noAge = await runOps(['prune'], { DATABASE_URL: 'postgres://x@127.0.0.1:1/none' });
    expect(noAge.code).toBe(2);
    expect(noAge.stderr).toMatch(/--older-than is required/);
    const bare = await runOps(['prune', '--older-than', '30'], {
      DATABASE_URL: 'postgres://x@127.0.0.1:1/none',
    });
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/duration like 30d/);
  });
});

describe('RetentionJob', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase();
  });
  afterAll(() => db.drop());

  it('runs one batch at a time: a second job skips while another holds the lock, and leaves no lock behind', async () => {
    const generated = await generateOutboxRows(db.pool, 10_000);
    await db.pool.query(
      `INSERT INTO processed_messages (consumer, message_id, processed_at)
       SELECT 'mailer', 'm-' || g, now() - interval '20 days' FROM generate_series(1, 250) g`,
    );
    const holder = await db.pool.connect();
    try {
      const job = createRetentionJob({ connect: poolSessions(db.pool), batchSize: 500 });
      // Another runner's batch in progress: its transaction holds the lock.
      await holder.query('BEGIN');
      await holder.query(
        `SELECT pg_advisory_xact_lock(hashtext('agent-outbox:retention'), hashtext('public'))`,
      );
      expect(await job.runOnce()).toEqual({ ran: false });
      await holder.query('COMMIT');
      // A process of an earlier version holds the same keys as a session lock: excluded too.
      await holder.query(
        `SELECT pg_advisory_lock(hashtext('agent-outbox:retention'), hashtext('public'))`,
      );
      expect(await job.runOnce()).toEqual({ ran: false });
      expect((await countKinds(db.pool)).oldDispatched).toBe(generated.oldDispatched);
      await holder.query(
        `SELECT pg_advisory_unlock(hashtext('agent-outbox:retention'), hashtext('public'))`,
      );

      const run = await job.runOnce();
      expect(run).toEqual({
        ran: true,
        outbox: { removed: generated.oldDispatched, batches: expect.any(Number), archived: false },
        ledger: { deleted: 250, batches: 1 },
        dedupeKeys: { removed: 0, batches: 1 },
      });
      // No advisory lock outlived the run's transactions, on any connection of the pool.
      const { rows } = await holder.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database =
           (SELECT oid FROM pg_database WHERE datname = current_database())`,
      );
      expect(rows[0]!.n).toBe(0);
      await job.stop();
    } finally {
      holder.release(true);
    }
  });

  it('start() runs on schedule and reports through events; stop() ends it', async () => {
    await generateOutboxRows(db.pool, 2_000);
    const job = createRetentionJob({ connect: poolSessions(db.pool), intervalMs: 3_600_000 });
    const ran = new Promise<number>((resolve) =>
      job.on('retention:run:success', (r) => resolve(r.outbox.removed)),
    );
    job.start();
    expect(await ran).toBeGreaterThan(0);
    await job.stop();
    expect((await countKinds(db.pool)).oldDispatched).toBe(0);
  });
});
