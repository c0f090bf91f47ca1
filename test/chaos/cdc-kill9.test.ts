import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import type { TestDatabase } from '../helpers/database.js';
import { createLogicalTestDatabase } from '../helpers/logical-database.js';
import { checkHistory, expectedOf } from '../helpers/history.js';
import { enqueueCommitted, manyMessages } from '../helpers/outbox-fixtures.js';
import { killNine, useSlowReceiver } from '../helpers/kill9.js';
import type { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { dropSlots, slotState } from '../fixtures/latency/cdc-helpers.js';

const script = fileURLToPath(new URL('../fixtures/latency/cdc-process.ts', import.meta.url));

interface CdcProcess {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  exited: Promise<number | string>;
}

function startCdc(env: Record<string, string>): CdcProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  let buffer = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    const parts = buffer.split('\n');
    buffer = parts.pop()!;
    for (const line of parts) if (line.startsWith('{')) lines.push(JSON.parse(line));
  });
  child.stderr!.on('data', (chunk: Buffer) => process.stderr.write(chunk));
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  return { child, lines, exited };
}

// Until `harness.fast()`, each delivery takes 20 ms, so the victim dies with requests and leases
// in flight. Its slots are dropped before the database (a private server's drop stops it).
const harness = useSlowReceiver({
  slowMs: 20,
  database: createLogicalTestDatabase,
  beforeDrop: (d) => dropSlots(d.pool, d.name),
});
let db: TestDatabase;
let receiver: WebhookReceiver;
beforeAll(() => {
  ({ db, receiver } = harness.current());
});

describe('kill -9 of a CDC dispatcher mid-stream', () => {
  it('a restarted one reuses the slot and publishes everything; nothing lost, order kept', async () => {
    const slot = `ao_cdc_kill_${db.name.slice(-8)}`;
    const env = {
      DATABASE_URL: db.url,
      PUBLISHER_URL: receiver.url,
      SLOT: slot,
      LEASE_MS: '3000',
      SWEEP_MS: '600000',
    };
    const victim = startCdc(env);
    await expect
      .poll(() => victim.lines.some((l) => l.event === 'started'), { timeout: 30_000 })
      .toBe(true);
    expect(victim.lines.some((l) => l.event === 'slot-create')).toBe(true);

    // A stream of transactions; kill the victim while it is publishing them.
    const written = [];
    for (let round = 0; round < 20; round++) {
      written.push(...(await enqueueCommitted(db.pool, manyMessages(10, 2))));
    }
    await expect.poll(() => receiver.distinct(), { timeout: 30_000 }).toBeGreaterThan(20);
    await killNine(victim);
    const delivered = receiver.distinct();
    expect(delivered).toBeLessThan(400); // it really died mid-stream
    const confirmedAtDeath = (await slotState(db.pool, slot))!.confirmed;
    harness.fast();

    // More commits while no CDC process runs.
    for (let round = 0; round < 5; round++) {
      written.push(...(await enqueueCommitted(db.pool, manyMessages(10, 2))));
    }
    const survivor = startCdc(env);
    await expect.poll(() => receiver.distinct(), { timeout: 60_000 }).toBe(500);
    expect(survivor.lines.some((l) => l.event === 'slot-create')).toBe(false);
    const start = survivor.lines.find((l) => l.event === 'stream-start')!;
    expect(start).toMatchObject({ slot, reconnect: false });
    expect(start.lsn).toBe(confirmedAtDeath);
    survivor.child.kill('SIGTERM');
    expect(await survivor.exited).toBe(0);

    const report = checkHistory(expectedOf(written), receiver.events);
    expect(report.lost).toEqual([]);
    expect(report.unexpected).toEqual([]);
    expect(report.orderViolations).toEqual([]);
    expect(report.concurrentDuplicates).toEqual([]);
    const pending = await db.pool.query(
      'SELECT count(*)::int AS n FROM outbox WHERE dispatched_at IS NULL',
    );
    expect(pending.rows[0].n).toBe(0);
  }, 120_000);
});
