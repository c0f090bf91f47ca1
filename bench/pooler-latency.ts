/**
 * Commit-to-publish latency of `outbox dispatch` through PgBouncer in transaction mode (issue 41,
 * the figures of docs/managed-postgres.md), the real CLI in its own process each time:
 *
 * - `direct`: everything on Postgres directly, LISTEN on (the baseline);
 * - `pooler --listen-url direct`: the pool through PgBouncer, LISTEN on a direct connection;
 * - `pooler --no-listen`: everything through PgBouncer, polling every 1000 ms (the default);
 * - `pooler, LISTEN left on`: what a user gets without either flag — the start-up check finds
 *   that LISTEN hears nothing through the pooler, says so, and polls as with --no-listen.
 *
 * The producer commits one message per transaction through PgBouncer (`preparedStatements:
 * false`), at irregular intervals (150-450 ms, so polls and commits do not fall into step); the
 * clock starts when COMMIT is sent and stops when the HTTP destination (in this process) receives
 * the message, so every figure includes the commit.
 *
 *   npx tsx bench/pooler-latency.ts [--messages 100]
 *
 * Needs PgBouncer installed (apt-get install -y pgbouncer); starts its own on a free port.
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createOutbox, fromPg } from '../src/index.js';
import { startPgBouncer } from '../test/helpers/pgbouncer.js';
import { createBenchDatabase } from './lib/database.js';
import { log, percentiles, round, sleep } from './lib/measure.js';

const { values } = parseArgs({ options: { messages: { type: 'string', default: '100' } } });
const MESSAGES = Number(values.messages);
const bin = fileURLToPath(new URL('../src/cli/bin.ts', import.meta.url));
const outbox = createOutbox();

const db = await createBenchDatabase('pooler');
const bouncer = await startPgBouncer(db.url);
const pooledUrl = bouncer.url(db.url);
const pooled = new pg.Pool({ connectionString: pooledUrl, max: 2 });

const receivedAt = new Map<string, number>();
const server = createServer((request, response) => {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const now = performance.now();
    const id = (JSON.parse(Buffer.concat(chunks).toString()) as { id: string }).id;
    if (!receivedAt.has(id)) receivedAt.set(id, now);
    response.writeHead(200).end();
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const receiver = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;

const configurations: [string, string[]][] = [
  ['direct (LISTEN)', ['--database-url', db.url]],
  ['pooler, --listen-url direct', ['--database-url', pooledUrl, '--listen-url', db.url]],
  ['pooler, --no-listen', ['--database-url', pooledUrl, '--no-listen']],
  ['pooler, LISTEN left on (checked, falls back)', ['--database-url', pooledUrl]],
];

try {
  log(`PgBouncer ${bouncer.port}, ${MESSAGES} messages per configuration`);
  for (const [name, flags] of configurations) {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', bin, 'dispatch', '--publisher', receiver, ...flags],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    while (!/ dispatcher \S+ on /.test(output)) await sleep(50);
    await sleep(1_000);
    const sentAt = new Map<string, number>();
    for (let i = 0; i < MESSAGES; i++) {
      const client = await pooled.connect();
      await client.query('BEGIN');
      const message = await outbox.enqueue(fromPg(client, { preparedStatements: false }), {
        topic: 'mail.send',
        aggregateId: `a-${i % 10}`,
        payload: { i },
      });
      sentAt.set(message.messageId, performance.now());
      await client.query('COMMIT');
      client.release();
      await sleep(150 + Math.random() * 300);
    }
    while ([...sentAt.keys()].some((id) => !receivedAt.has(id))) await sleep(20);
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    const samples = [...sentAt].map(([id, sent]) => receivedAt.get(id)! - sent);
    const p = percentiles(samples);
    const warned = /heard nothing/.test(output) ? ' (warned at start: LISTEN heard nothing)' : '';
    log(
      `${name}: p50 ${round(p.p50, 1)} ms, p95 ${round(p.p95, 1)} ms, p99 ${round(p.p99, 1)} ms, max ${round(Math.max(...samples), 1)} ms${warned}`,
    );
  }
} finally {
  server.close();
  await pooled.end();
  await bouncer.stop();
  await db.drop();
}
