import pg from 'pg';
import { createListenNotifyWakeSource } from '../../src/dispatcher/wake/listen-notify.js';
import { laneStatus } from '../../src/lanes/lane-admin.js';
import { createOutbox, fromPg, type EnqueuedMessage, type OutboxMessage } from '../../src/index.js';
import { dispatchArgs } from './cli-process.js';
import { inTransaction } from './transaction.js';

/**
 * What the lanes engine's fault tests (test/chaos/lanes-*.test.ts) share: the lanes writer on a
 * committed transaction, `outbox dispatch --engine lanes` arguments, and what is left to publish.
 */
const lanesOutbox = createOutbox({ engine: 'lanes' });

/**
 * Enqueues `messages` with the lanes writer in one committed transaction on `pool`.
 * `preparedStatements: false` behind a transaction pooler, as the docs say.
 */
export async function enqueueLanes(
  pool: pg.Pool,
  messages: readonly OutboxMessage[],
  options: { preparedStatements?: boolean } = {},
): Promise<EnqueuedMessage[]> {
  return inTransaction(pool, (client) => lanesOutbox.enqueue(fromPg(client, options), messages));
}

/** `outbox dispatch --engine lanes` to `publisherUrl` on `databaseUrl`, polling every 50 ms. */
export function laneDispatchArgs(databaseUrl: string, publisherUrl: string, ...extra: string[]) {
  return dispatchArgs(databaseUrl, publisherUrl, '--engine', 'lanes', ...extra);
}

/** Messages not published yet: the backlog after the cursors, parked and retrying (not dead). */
export async function lanesPending(pool: pg.Pool): Promise<number> {
  const { total } = await laneStatus(fromPg(pool));
  return total.backlog + total.parked + total.retrying;
}

/** Lane rows: who owns each lane now (null when free), by lane number. */
export async function laneOwners(pool: pg.Pool): Promise<Map<number, string | null>> {
  const { rows } = await pool.query<{ lane: number; owner: string | null }>(
    `SELECT lane, CASE WHEN lease_expires_at > now() THEN owner END AS owner
       FROM outbox_lanes ORDER BY lane`,
  );
  return new Map(rows.map((r) => [Number(r.lane), r.owner]));
}

/**
 * A LISTEN wake source on its own connection to `url` (heartbeat 500 ms, waiter rows live 5 s:
 * a test sees a stopped waiter go soon). `onConnect` is told of each connection it opens.
 */
export function listenWakeSource(url: string, onConnect: () => void = () => undefined) {
  return createListenNotifyWakeSource({
    connect: async () => {
      onConnect();
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      return client;
    },
    heartbeatMs: 500,
    waiterTtlMs: 5_000,
  });
}

/** Waits (up to 2 s) until a dispatcher waits for a NOTIFY: its row in `outbox_waiters` lives. */
export async function armed(pool: pg.Pool): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const { rows } = await pool.query<{ n: string }>('SELECT count(*) AS n FROM outbox_waiters');
    if (Number(rows[0]!.n) > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
