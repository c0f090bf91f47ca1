import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { createOutbox, fromPg } from '../../src/index.js';
import type { BenchDatabase } from '../lib/database.js';
import { resetOutbox } from '../lib/database.js';
import { log, round, sleep } from '../lib/measure.js';

const child = fileURLToPath(new URL('./memory-child.ts', import.meta.url));
const outbox = createOutbox();

/** Runs the child under a steady load and returns its last RSS sample in MiB. */
async function steadyRss(db: BenchDatabase, mode: 'dispatcher' | 'baseline', seconds: number) {
  await resetOutbox(db.pool);
  const proc = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', child, db.url, mode], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let last = NaN;
  proc.stdout.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString().split('\n'))
      if (line.startsWith('{')) last = (JSON.parse(line) as { rssMb: number }).rssMb;
  });
  while (Number.isNaN(last)) await sleep(50);
  // 1,000 messages/s in batches of 10 per transaction, for `seconds`.
  const deadline = performance.now() + seconds * 1000;
  const client = await db.client();
  while (performance.now() < deadline) {
    await client.query('BEGIN');
    await outbox.enqueue(
      fromPg(client),
      Array.from({ length: 10 }, () => ({
        topic: 'payment.charge',
        aggregateId: randomUUID(),
        payload: { padding: 'x'.repeat(200) },
      })),
    );
    await client.query('COMMIT');
    await sleep(10);
  }
  await client.end();
  await sleep(600);
  const rss = last;
  proc.kill('SIGTERM');
  return rss;
}

/** `dispatcher_rss_mb`: RSS of a dispatcher process at steady state, beside an idle baseline. */
export async function memory(db: BenchDatabase, seconds: number) {
  const baseline = await steadyRss(db, 'baseline', seconds);
  const dispatcher = await steadyRss(db, 'dispatcher', seconds);
  log(
    `rss: dispatcher ${round(dispatcher, 1)} MiB, idle process with the same modules ${round(baseline, 1)} MiB`,
  );
  return {
    dispatcherRssMb: round(dispatcher, 1),
    baselineRssMb: round(baseline, 1),
    ratio: round(dispatcher / baseline, 3),
  };
}
