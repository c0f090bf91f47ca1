import pg from 'pg';
import { createOutbox, fromPg } from './src/index.js';
import { createLaneDispatcher } from './src/lanes/lane-dispatcher.js';
const url = 'postgres://postgres@127.0.0.1/lanes_dev';
const pool = new pg.Pool({ connectionString: url, max: 10 });
await pool.query('TRUNCATE outbox_lane_messages, outbox_lane_parked; UPDATE outbox_lanes SET cursor = 0, owner = NULL, lease_expires_at = NULL');
const outbox = createOutbox({ engine: 'lanes' });
const seen = new Set<string>();
const d = createLaneDispatcher({ executor: fromPg(pool), publisher: { publish: async (ms) => { ms.forEach(m => seen.add(m.id)); return ms.map(() => ({ status: 'published' as const })); } }, pollIntervalMs: 5 });
d.start();
const written: string[] = [];
const writtenRow = new Map<string,string>();
let stop = false;
const writers = Array.from({ length: 4 }, async (_, w) => {
  const c = new pg.Client({ connectionString: url }); await c.connect();
  let i = 0;
  while (!stop) {
    await c.query('BEGIN');
    const [m] = await outbox.enqueue(fromPg(c), [{ topic: 't', aggregateId: `w${w}-${i++ % 50}`, payload: {} }]);
    await c.query('COMMIT');
    written.push(m!.messageId); writtenRow.set(m!.messageId, m!.id);
    await new Promise(r => setTimeout(r, 3));
  }
  await c.end();
});
for (let t = 0; t < 6; t++) {
  await new Promise(r => setTimeout(r, 1000));
  const l = await pool.query('SELECT min(cursor)::text AS min, max(cursor)::text AS max FROM outbox_lanes');
  const last = await pool.query("SELECT pg_sequence_last_value('outbox_lane_ids')::text AS v");
  console.log(`t=${t} written ${written.length} seen ${seen.size} cursors ${l.rows[0].min}..${l.rows[0].max} last ${last.rows[0].v}`);
}
stop = true; await Promise.all(writers);
await new Promise(r => setTimeout(r, 1000));
const miss = written.filter(x => !seen.has(x)).map(x => writtenRow.get(x)).slice(0, 20); console.log(miss.join(','));
console.log(`final written ${written.length} seen ${seen.size} missing ${written.filter(x => !seen.has(x)).length}`);
await d.stop(); await pool.end();
