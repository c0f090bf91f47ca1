import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  createDispatcher,
  createPublisherFromUrl,
  fromPg,
  type Envelope,
  type Publisher,
} from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { quiesce, resetOutbox, seedPending } from '../lib/database.js';
import { log, round, sleep, timed } from '../lib/measure.js';
import { noopPublisher } from './enqueue.js';

const sinkScript = fileURLToPath(new URL('./http-sink.ts', import.meta.url));
const TOPIC = 'payment.charge'; // ordered: no unordered-topic pattern matches it

/**
 * Writes `count` ordered messages on `aggregates` aggregates through the insert trigger (one
 * statement, sequences and `ready` decided by the trigger as for any writer: 20,000 on one
 * aggregate load in ~3 s here), then drains them with our dispatcher (batch 200, one loop).
 * Returns messages/s and the claims that carried them.
 */
async function orderedDrain(
  db: BenchDatabase,
  count: number,
  aggregates: number,
  publisher: Publisher,
): Promise<{ perSecond: number; batches: number }> {
  await resetOutbox(db.pool);
  await seedPending(db.pool, count, { topic: TOPIC, aggregates });
  await quiesce(db);
  const dispatcher = createDispatcher({ executor: fromPg(db.pool), publisher, batchSize: 200 });
  let published = 0;
  let batches = 0;
  const ms = await timed(async () => {
    ({ published, batches } = await dispatcher.drain());
  });
  if (published !== count) throw new Error(`hot aggregate: dispatched ${published} of ${count}`);
  return { perSecond: (count / ms) * 1000, batches };
}

/**
 * `hot_aggregate_ratio`: `count` ordered messages on ONE aggregate over the same count on 500
 * aggregates, both drained by our dispatcher with the no-op publisher. Before issue 16 only an
 * aggregate's head was claimable, so one aggregate cost a claim → publish → settle round per
 * message. Best of `rounds` alternated drains each.
 */
export async function hotAggregate(db: BenchDatabase, count: number, rounds: number) {
  const best = { oneAggregate: 0, fiveHundred: 0 };
  let claims = { oneAggregate: 0, fiveHundred: 0 };
  for (let r = 0; r < rounds; r++) {
    const spread = await orderedDrain(db, count, 500, noopPublisher);
    const hot = await orderedDrain(db, count, 1, noopPublisher);
    best.fiveHundred = Math.max(best.fiveHundred, spread.perSecond);
    best.oneAggregate = Math.max(best.oneAggregate, hot.perSecond);
    claims = { oneAggregate: hot.batches, fiveHundred: spread.batches };
  }
  log(
    `hot aggregate, no-op publisher: ${Math.round(best.oneAggregate)} msg/s on 1 aggregate, ${Math.round(best.fiveHundred)} on 500`,
  );
  return {
    ratio: round(best.oneAggregate / best.fiveHundred, 3),
    count,
    perSecond: {
      oneAggregate: Math.round(best.oneAggregate),
      fiveHundredAggregates: Math.round(best.fiveHundred),
    },
    claimsWithMessages: claims,
  };
}

export interface Sink {
  url: string;
  /** What the sink received since the last call, and how much of it was out of order. */
  stats(): Promise<{ received: number; outOfOrder: number }>;
  close(): void;
}

export async function startSink(): Promise<Sink> {
  const proc: ChildProcess = spawn(process.execPath, ['--import', 'tsx', sinkScript], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let port = 0;
  proc.stdout!.on('data', (chunk: Buffer) => {
    const line = chunk.toString().split('\n')[0]!;
    if (line.startsWith('{')) port = (JSON.parse(line) as { port: number }).port;
  });
  const deadline = Date.now() + 30_000;
  while (port === 0) {
    if (Date.now() > deadline || proc.exitCode !== null) throw new Error('http sink did not start');
    await sleep(20);
  }
  const base = `http://127.0.0.1:${port}`;
  return {
    url: `${base}/hook`,
    stats: async () =>
      (await (await fetch(`${base}/stats`)).json()) as { received: number; outOfOrder: number },
    close: () => proc.kill('SIGTERM'),
  };
}

/**
 * The baseline of `hot_aggregate_http_ratio`: the envelopes of the pending messages, in sequence
 * order, POSTed one after another with `fetch`, each awaited before the next — the most an
 * in-order sender can do against a receiver that confirms each message. Same headers and body as
 * HttpPublisher sends (JSON of the envelope, built per request; `Idempotency-Key`).
 */
async function plainLoop(db: BenchDatabase, url: string, count: number): Promise<number> {
  const { rows } = await db.pool.query<Envelope & { createdAt: Date }>(
    `SELECT message_id::text AS id, topic, aggregate_id AS "aggregateId", sequence::int AS sequence,
            payload, headers, created_at AS "createdAt"
     FROM outbox WHERE dispatched_at IS NULL ORDER BY aggregate_id, sequence`,
  );
  const envelopes: Envelope[] = rows.map((r) => ({ ...r, createdAt: r.createdAt.toISOString() }));
  if (envelopes.length !== count) throw new Error(`plain loop: ${envelopes.length} of ${count}`);
  const ms = await timed(async () => {
    for (const envelope of envelopes) {
      const response = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': envelope.id },
        body: JSON.stringify(envelope),
        redirect: 'manual',
      });
      await response.text();
      if (response.status !== 200) throw new Error(`plain loop: HTTP ${response.status}`);
    }
  });
  return (count / ms) * 1000;
}

/**
 * `hot_aggregate_http_ratio`: `count` messages on ONE aggregate drained by our dispatcher to a
 * local HTTP sink through the publisher `outbox dispatch --publisher http://…` builds
 * (`createPublisherFromUrl`: HttpPublisher), over the plain loop above POSTing the same envelopes
 * to the same sink. The sink checks that every aggregate's sequences arrive in order. Best of
 * `rounds`; which of the two goes first alternates.
 */
export async function hotAggregateHttp(db: BenchDatabase, count: number, rounds: number) {
  const sink = await startSink();
  const best = { ours: 0, plainLoop: 0 };
  const check = async (who: string) => {
    const { received, outOfOrder } = await sink.stats();
    if (received !== count || outOfOrder > 0)
      throw new Error(`${who}: sink received ${received} of ${count}, ${outOfOrder} out of order`);
  };
  try {
    const publisher = await createPublisherFromUrl(sink.url);
    const ours = async () => {
      const { perSecond } = await orderedDrain(db, count, 1, publisher);
      await check('hot aggregate over HTTP');
      best.ours = Math.max(best.ours, perSecond);
    };
    const loop = async () => {
      await resetOutbox(db.pool);
      await seedPending(db.pool, count, { topic: TOPIC, aggregates: 1 });
      await quiesce(db);
      best.plainLoop = Math.max(best.plainLoop, await plainLoop(db, sink.url, count));
      await check('plain HTTP loop');
    };
    for (let r = 0; r < rounds; r++) {
      if (r % 2 === 0) {
        await loop();
        await ours();
      } else {
        await ours();
        await loop();
      }
    }
  } finally {
    sink.close();
  }
  log(
    `hot aggregate over HTTP: ${Math.round(best.ours)} msg/s ours, ${Math.round(best.plainLoop)} plain POST loop`,
  );
  return {
    ratio: round(best.ours / best.plainLoop, 3),
    count,
    perSecond: { ours: Math.round(best.ours), plainLoop: Math.round(best.plainLoop) },
  };
}
