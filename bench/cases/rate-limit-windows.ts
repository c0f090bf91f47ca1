import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { BenchDatabase } from '../lib/database.js';
import { seedPending } from '../lib/database.js';
import { log } from '../lib/measure.js';
import { busiestWindow, busiestWindowAt } from '../../test/helpers/busiest-window.js';

const bin = fileURLToPath(new URL('../../src/cli/bin.ts', import.meta.url));
const root = fileURLToPath(new URL('../..', import.meta.url));

/** Rows written to `table` so far (inserts + updates + deletes, from the statistics collector). */
async function rowsWritten(db: BenchDatabase, table: string): Promise<number> {
  await db.pool.query('SELECT pg_stat_force_next_flush()');
  const { rows } = await db.pool.query<{ n: string }>(
    `SELECT (n_tup_ins + n_tup_upd + n_tup_del)::text AS n FROM pg_stat_user_tables WHERE relname = $1`,
    [table],
  );
  return Number(rows[0]?.n ?? 0);
}

/**
 * Issue 43, item 3: `rate_limit_window_max_ratio` and `rate_limit_utilisation`. The issue's trial
 * as a new user runs it: three `outbox dispatch` PROCESSES (CLI defaults: LISTEN/NOTIFY wake-ups,
 * batch 200) with `--rate-limit 'payment.*=50/s'` (default burst: 50) deliver `messages`
 * `payment.charge` messages on 500 aggregates to a webhook endpoint in this process, which
 * records when each arrives.
 *
 * - utilisation: (delivered − burst) over the time from the first delivery to the last, over the
 *   limit — a backlog waits the whole time, so the limit should be spent all along (≥ 0.9).
 * - window max ratio: the busiest 5-second window over 5 s × the limit, among windows starting
 *   once the start is over (twice burst / limit seconds after the first delivery): a full
 *   bucket at the start legitimately allows 5 s × limit + burst (1.2 here), but with a backlog
 *   waiting the bucket should never fill again — a window over the limit then is tokens left idle
 *   and spent at once later (≤ 1.1). The window including the start is in `details`.
 * - what the gate costs the database: rows written to `outbox` and to `outbox_rate_limits` per
 *   delivered message (a claim and each give-back are one row write each; 2 is the floor: the
 *   claim and the settle).
 *
 * `engine: 'lanes'` runs the same trial on the lanes engine (`outbox dispatch --engine lanes`,
 * the messages written through `outbox_lane_inbox`): the engine a new schema runs on, whose
 * figures are the keys since session 33 (the claim engine's are in `details`). Its database cost is the rows written to
 * the lanes' own tables (`outbox_lanes`: a cursor move per batch and lane; `outbox_lane_parked`:
 * a message the limit held back and its settle) and to the buckets, per delivered message.
 */
export async function rateLimitWindows(
  db: BenchDatabase,
  messages: number,
  engine: 'claims' | 'lanes' = 'claims',
) {
  const perSecond = 50;
  const burst = perSecond;
  const lanes = engine === 'lanes';
  if (lanes) {
    await db.pool.query(
      `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload)
       SELECT 'payment.charge', 'agg-' || (g % 500), jsonb_build_object('n', g)
       FROM generate_series(1, $1) g ORDER BY g`,
      [messages],
    );
    await db.pool.query('VACUUM ANALYZE outbox_lane_messages');
  } else await seedPending(db.pool, messages, { topic: 'payment.charge', aggregates: 500 });
  const engineTables = lanes ? ['outbox_lanes', 'outbox_lane_parked'] : ['outbox'];
  const arrivals: number[] = [];
  const server: Server = createServer((request, response) => {
    request.resume();
    request.on('end', () => {
      arrivals.push(performance.now());
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  const engineRows = async () => {
    let n = 0;
    for (const table of engineTables) n += await rowsWritten(db, table);
    return n;
  };
  const outboxBefore = await engineRows();
  const children: ChildProcess[] = [0, 1, 2].map(() =>
    spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        bin,
        'dispatch',
        '--database-url',
        db.url,
        '--publisher',
        url,
        '--rate-limit',
        `payment.*=${perSecond}/s`,
        '--engine',
        engine,
      ],
      { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] },
    ),
  );
  let errors = '';
  children.forEach((c) => c.stderr!.on('data', (b: Buffer) => (errors += b.toString())));
  const deadline = Date.now() + (messages / perSecond) * 4_000 + 30_000;
  while (arrivals.length < messages && Date.now() < deadline)
    await new Promise((resolve) => setTimeout(resolve, 200));
  await Promise.all(
    children.map(
      (c) =>
        new Promise<void>((resolve) => {
          c.on('exit', () => resolve());
          c.kill('SIGTERM');
        }),
    ),
  );
  await new Promise<void>((resolve) => server.close(() => resolve()));
  if (arrivals.length < messages)
    throw new Error(`rate limit case: ${arrivals.length} of ${messages} delivered\n${errors}`);
  const outboxRows = (await engineRows()) - outboxBefore;
  const bucketRows = await rowsWritten(db, 'outbox_rate_limits');
  arrivals.sort((a, b) => a - b);
  const first = arrivals[0]!;
  const seconds = (arrivals.at(-1)! - first) / 1000;
  const utilisation = (arrivals.length - burst) / seconds / perSecond;
  // Windows from twice the time a burst takes to refill: at 1 s, a machine busy enough to start
  // the three processes a second apart still carried the first bucket's tokens (1.15 once).
  const steadyAt = busiestWindowAt(arrivals, 5_000, first + ((2 * burst) / perSecond) * 1000);
  const steady = steadyAt.count;
  const withStart = busiestWindow(arrivals, 5_000, first);
  const oneSecond = busiestWindow(arrivals, 1_000, first);
  const round = (x: number, d = 1000) => Math.round(x * d) / d;
  log(
    `rate limit windows (${engine}): ${arrivals.length} in ${seconds.toFixed(1)} s under ${perSecond}/s, 3 processes: utilisation ${utilisation.toFixed(3)}, busiest 5 s ${steady}`,
  );
  return {
    utilisation: round(utilisation),
    windowMaxRatio: round(steady / (5 * perSecond)),
    /** Seconds after the first arrival when the busiest window (after the first burst) starts. */
    windowMaxStartS: round((steadyAt.start - first) / 1000, 10),
    windowMaxRatioFrom1s: round(
      busiestWindow(arrivals, 5_000, first + (burst / perSecond) * 1000) / (5 * perSecond),
    ),
    windowMaxRatioWithStart: round(withStart / (5 * perSecond)),
    busiestSecond: oneSecond,
    perSecond,
    burst,
    engine,
    dispatchers: `3 outbox dispatch${lanes ? ' --engine lanes' : ''} processes (CLI defaults)`,
    delivered: arrivals.length,
    seconds: round(seconds, 10),
    /** Rows written to `outbox` (lanes: `outbox_lanes` and `outbox_lane_parked`) a message. */
    outboxRowsWrittenPerMessage: round(outboxRows / arrivals.length, 100),
    bucketRowsWrittenPerMessage: round(bucketRows / arrivals.length, 100),
  };
}
