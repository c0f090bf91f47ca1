import { beforeAll, describe, expect, it } from 'vitest';
import type { OutboxMessage } from '../../../src/core/message.js';
import { createLaneDispatcher } from '../../../src/lanes/lane-dispatcher.js';
import { laneMessagesStatusSql } from '../../../src/sql/effect-status.js';
import { fromPg } from '../../../src/store/from-pg.js';
import { createOutbox } from '../../../src/writer/create-outbox.js';
import type { TestDatabase } from '../../helpers/database.js';
import { explainAnalyze, rowsRead, type PlanNode } from '../../helpers/explain.js';
import { blocksOf, noopPublisher, useHeldSnapshotDatabase } from '../../helpers/held-snapshot.js';

/**
 * What the effect status reads on the lanes engine (`engine: 'lanes'`), beside 2,000 and 20,000
 * published messages, under a REPEATABLE READ snapshot held open in another connection the whole
 * time: by row id, by a held message's id and by any other message id it stays the same
 * (primary-key probes: a message id names its row's lane and id since migration 030). Before
 * 030 a message id that was not held was a sequential scan of `outbox_lane_messages`, every row
 * retention keeps (54 buffers beside 2,000 messages, 446 beside 20,000).
 */
const held = useHeldSnapshotDatabase();
let db: TestDatabase;
beforeAll(() => {
  db = held.current();
});

const outbox = createOutbox({ engine: 'lanes' });

/** `count` messages in transactions of 500 over 300 aggregates; returns the last call's. */
async function write(count: number, prefix: string, extra: Partial<OutboxMessage> = {}) {
  let last: Awaited<ReturnType<typeof outbox.enqueue>> = [];
  for (let done = 0; done < count; done += 500) {
    const messages = Array.from({ length: Math.min(500, count - done) }, (_, i) => ({
      topic: 'mail.send',
      aggregateId: `${prefix}-${(done + i) % 300}`,
      payload: { i: done + i },
      ...extra,
    })) as OutboxMessage[];
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      last = await outbox.enqueue(fromPg(client), messages);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  }
  return last;
}

const drain = () =>
  createLaneDispatcher({ executor: fromPg(db.pool), publisher: noopPublisher }).drain();

async function explained(messageIds: string[], rowIds: string[]) {
  const client = await db.pool.connect();
  try {
    const plan = await explainAnalyze(client, laneMessagesStatusSql('public'), [
      messageIds,
      rowIds,
      null,
    ]);
    return {
      plan,
      blocks: blocksOf(plan),
      messageRows: rowsRead(plan, 'outbox_lane_messages'),
    };
  } finally {
    client.release();
  }
}

/** Relations scanned sequentially, by nodes that ran (a one-time filter may skip one: 0 loops). */
const seqScans = (p: PlanNode): string[] => [
  ...((p as { 'Node Type'?: string })['Node Type'] === 'Seq Scan' && (p['Actual Loops'] ?? 0) > 0
    ? [p['Relation Name']!]
    : []),
  ...(p.Plans ?? []).flatMap(seqScans),
];

async function measure(prefix: string) {
  const [plain] = await write(1, `${prefix}-probe`);
  const [heldOne] = await write(1, `${prefix}-held`, { requiresApproval: true });
  await drain();
  return {
    byRowId: await explained([], [plain!.id]),
    byHeldId: await explained([heldOne!.messageId], []),
    byMessageId: await explained([plain!.messageId], []),
    // The same place, another millisecond: a forged id reads nothing, and reads as little.
    byForgedId: await explained([`00000000-0000${plain!.messageId.slice(13)}`], []),
  };
}

describe('lanes engine: the effect status lookup', () => {
  it('by row id, by a held message id and by any other message id reads the same beside 2,000 and 20,000 messages, under a held snapshot', async () => {
    await write(2_000, 'small');
    await drain();
    const small = await measure('small');
    await write(18_000, 'large');
    await drain();
    const large = await measure('large');
    const line = (name: string, m: Awaited<ReturnType<typeof measure>>) =>
      `${name}: row id ${m.byRowId.blocks} buffers/${m.byRowId.messageRows} message rows, ` +
      `held id ${m.byHeldId.blocks}/${m.byHeldId.messageRows}, ` +
      `message id ${m.byMessageId.blocks}/${m.byMessageId.messageRows}, ` +
      `forged id ${m.byForgedId.blocks}/${m.byForgedId.messageRows}`;
    console.log(`[lanes effect status bound] ${line('2,000', small)}; ${line('20,000', large)}`);

    // Each finds its message; the forged id none.
    for (const m of [small, large]) {
      for (const lookup of [m.byRowId, m.byHeldId, m.byMessageId])
        expect(lookup.plan['Actual Rows']).toBe(1);
      expect(m.byForgedId.plan['Actual Rows']).toBe(0);
    }
    // By row id: one primary-key probe per lane (16), whatever the table holds.
    expect(small.byRowId.messageRows).toBeLessThanOrEqual(2);
    expect(large.byRowId.messageRows).toBe(small.byRowId.messageRows);
    expect(large.byRowId.blocks - small.byRowId.blocks).toBeLessThanOrEqual(16);
    expect(seqScans(large.byRowId.plan)).not.toContain('outbox_lane_messages');
    // By a message id, held or not, or forged: one primary-key probe at the place it names.
    for (const lookup of ['byHeldId', 'byMessageId', 'byForgedId'] as const) {
      expect([lookup, small[lookup].messageRows]).toEqual([lookup, 1]);
      expect([lookup, large[lookup].messageRows]).toEqual([lookup, 1]);
      expect(large[lookup].blocks - small[lookup].blocks).toBeLessThanOrEqual(4);
      expect(large[lookup].blocks).toBeLessThanOrEqual(40);
      expect(seqScans(large[lookup].plan)).not.toContain('outbox_lane_messages');
    }
  }, 180_000);
});
