/**
 * Child process of the memory case: `dispatcher` runs a polling dispatcher with the LISTEN/NOTIFY
 * wake source and a no-op publisher; `baseline` loads the same modules and opens the same pool
 * but dispatches nothing. Prints `{"rssMb": n}` every 250 ms after a forced GC when available.
 */
import pg from 'pg';
import { createListenNotifyWakeSource } from '../../src/dispatcher/wake/listen-notify.js';
import { createDispatcher, fromPg } from '../../src/index.js';
import { noopPublisher } from './enqueue.js';

const [url, mode] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: url, max: 3 });
await pool.query('SELECT 1');
if (mode === 'dispatcher') {
  const dispatcher = createDispatcher({
    executor: fromPg(pool),
    publisher: noopPublisher,
    pollIntervalMs: 5_000,
    wakeSource: createListenNotifyWakeSource({
      connect: async () => {
        const client = new pg.Client({ connectionString: url, keepAlive: true });
        await client.connect();
        return client;
      },
    }),
  });
  dispatcher.start();
}
setInterval(() => {
  (globalThis as { gc?: () => void }).gc?.();
  process.stdout.write(`${JSON.stringify({ rssMb: process.memoryUsage().rss / 2 ** 20 })}\n`);
}, 250);
