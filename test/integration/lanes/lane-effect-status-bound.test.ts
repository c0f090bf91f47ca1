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
 * time: by row id (primary-key probes), by a held message's id and by any other message id (the
 * unique index on `message_id`, migration 032; before it a sequential scan that grew with the
 * table) it stays the same.
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
  };
}

describe('lanes engine: the effect status lookup', () => {
  it('by row id, by a held message id and by any message id reads the same beside 2,000 and 20,000 messages, under a held snapshot', async () => {
    await write(2_000, 'small');
    await drain();
    const small = await measure('small');
    await write(18_000, 'large');
    await drain();
    const large = await measure('large');
    const line = (name: string, m: Awaited<ReturnType<typeof measure>>) =>
      `${name}: row id ${m.byRowId.blocks} buffers/${m.byRowId.messageRows} message rows, ` +
      `held id ${m.byHeldId.blocks}/${m.byHeldId.messageRows}, ` +
      `message id ${m.byMessageId.blocks}/${m.byMessageId.messageRows}`;
    console.log(`[lanes effect status bound] ${line('2,000', small)}; ${line('20,000', large)}`);

    // Each finds its message.
    for (const m of [small, large])
      for (const lookup of [m.byRowId, m.byHeldId, m.byMessageId])
        expect(lookup.plan['Actual Rows']).toBe(1);
    // By row id: one primary-key probe per lane (16), whatever the table holds.
    expect(small.byRowId.messageRows).toBeLessThanOrEqual(2);
    expect(large.byRowId.messageRows).toBe(small.byRowId.messageRows);
    expect(large.byRowId.blocks - small.byRowId.blocks).toBeLessThanOrEqual(16);
    expect(seqScans(large.byRowId.plan)).not.toContain('outbox_lane_messages');
    // By a held message's id: the decision row's unique index, the table is not scanned.
    expect(large.byHeldId.messageRows).toBeLessThanOrEqual(2);
    expect(large.byHeldId.blocks - small.byHeldId.blocks).toBeLessThanOrEqual(4);
    expect(seqScans(large.byHeldId.plan)).not.toContain('outbox_lane_messages');
    // By any other message id: the message_id index (migration 032), not a scan of the table.
    expect(large.byMessageId.messageRows).toBeLessThanOrEqual(2);
    expect(large.byMessageId.blocks - small.byMessageId.blocks).toBeLessThanOrEqual(4);
    expect(seqScans(large.byMessageId.plan)).not.toContain('outbox_lane_messages');
  }, 180_000);
});
