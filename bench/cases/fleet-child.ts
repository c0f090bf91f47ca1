/**
 * A dispatcher process of the fleet bench (fleet.ts), so that each side runs in processes of its
 * own as a deployment would: `single URL` serves one database (the baseline: a process per
 * database), `fleet ADMIN_URL GLOB BUDGET` serves every matching database. No-op publisher.
 * Prints JSON lines: `{"ready":true}` once started, then on `count N` from stdin
 * `{"doneAt":<epoch ms>}` when N messages were published since, and on `times` the publish time of
 * every message seen (`{"times":{"<id>":<epoch ms>}}`), and `{"stats":…}` on `stats`.
 */
import { createInterface } from 'node:readline';
import pg from 'pg';
import { createDispatcher, fromPg, type Publisher } from '../../src/index.js';
import { createFleetDispatcher } from '../../src/fleet/index.js';

const [mode, url, glob, budget] = process.argv.slice(2);
const times = new Map<string, number>();
let published = 0;
let waitingFor: { from: number; count: number } | undefined;
const publisher: Publisher = {
  publish: async (messages) => {
    const now = Date.now();
    for (const m of messages) if (!times.has(m.id)) times.set(m.id, now);
    published += messages.length;
    if (waitingFor && published - waitingFor.from >= waitingFor.count) {
      waitingFor = undefined;
      process.stdout.write(`${JSON.stringify({ doneAt: now })}\n`);
    }
    return messages.map(() => ({ status: 'published' as const }));
  },
};
const say = (o: unknown) => process.stdout.write(`${JSON.stringify(o)}\n`);

let stop: () => Promise<void>;
let stats: () => unknown = () => ({});
const started = Date.now();
if (mode === 'single') {
  const pool = new pg.Pool({ connectionString: url, max: 3, application_name: 'bench-single' });
  const dispatcher = createDispatcher({ executor: fromPg(pool), publisher, pollIntervalMs: 50 });
  dispatcher.start();
  stop = async () => {
    await dispatcher.stop();
    await pool.end();
  };
} else {
  const fleet = createFleetDispatcher({
    servers: [url!],
    databases: glob!,
    publisher,
    maxConnections: Number(budget),
    pollIntervalMs: 50,
  });
  await fleet.start();
  // Ready once the first pass (every tenant served once at start) is over: nothing queued or
  // connected for half a second.
  for (let quiet = 0; quiet < 5;) {
    await new Promise((r) => setTimeout(r, 100));
    const s = fleet.servers()[0]!;
    quiet = s.queued === 0 && s.connected === 0 ? quiet + 1 : 0;
  }
  stats = () => fleet.servers();
  stop = () => fleet.stop();
}
say({ ready: true, startupMs: Date.now() - started });
for await (const line of createInterface({ input: process.stdin })) {
  const [command, arg] = line.trim().split(' ');
  if (command === 'count') waitingFor = { from: published, count: Number(arg) };
  else if (command === 'times') say({ times: Object.fromEntries(times) });
  else if (command === 'stats') say({ stats: stats(), published });
  else if (command === 'stop') break;
}
await stop();
process.exit(0);
