import { randomBytes } from 'node:crypto';
import { OutboxValidationError } from '../../core/errors.js';
import {
  listenProbeSql,
  notifyProbeSql,
  probeChannel,
  unlistenProbeSql,
} from '../../sql/notify.js';
import type { SqlExecutor } from '../../store/sql-executor.js';
import type { ListenClient } from './listen-notify.js';

/** Options of {@link probeListen}. */
export interface ListenProbeOptions {
  /** Opens a new client the way the wake source does (same URL); the probe closes it. */
  connect: () => Promise<ListenClient>;
  /** Sends the NOTIFY: any connection to the same database, a pool or a pooler's included. */
  notify: SqlExecutor;
  /** How long to wait for the notification. Default 5 000. */
  timeoutMs?: number;
}

/** What {@link probeListen} saw. */
export interface ListenProbeResult {
  /** True when the notification reached the listening client. */
  delivered: boolean;
  /** Milliseconds from the NOTIFY's return to its arrival, or the time waited for it. */
  waitedMs: number;
}

/**
 * Does LISTEN through `connect` hear anything? LISTENs on a channel of its own, sends one NOTIFY
 * on it from `notify`, and waits for it.
 *
 * Why a round trip and not a look at the server: a pooler in transaction mode (PgBouncer,
 * Supavisor, Neon's `-pooler`) answers LISTEN with success, and the registration stays on the
 * server connection that ran it, which the pooler then hands to other clients; the listening
 * client is attached to no server connection while it waits, so the notification can never reach
 * it, and the wake source would fall back to its safety poll without a word. Nothing at startup
 * tells a pooler apart reliably — PgBouncer passes the server's `server_version` and
 * `application_name` through, Supavisor and RDS Proxy answer differently again, and a pooler in
 * session mode (or RDS Proxy, which pins a connection that ran LISTEN) does deliver. The round
 * trip tests the one thing that matters, on any of them. Sent from another connection: a NOTIFY
 * sent on the listener's own client would, through a pooler, often run on the very server
 * connection that ran the LISTEN and be delivered with the NOTIFY's answer, a false "works". On a
 * direct connection the notification arrives within milliseconds of the NOTIFY's commit, so the
 * default five seconds only ever runs out when nothing is coming.
 *
 * Throws when a statement or the connection fails, or does not answer within `timeoutMs` (then
 * nothing is known).
 */
export async function probeListen(options: ListenProbeOptions): Promise<ListenProbeResult> {
  const timeoutMs = options.timeoutMs ?? 5_000;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0)
    throw new OutboxValidationError('timeoutMs', `must be a number > 0, got ${timeoutMs}`);
  const token = randomBytes(8).toString('hex');
  const channel = probeChannel(token);
  // Every step bounded: a connection that stops answering must not hold a dispatcher's start.
  const connecting = options.connect();
  const client = await bounded(connecting, timeoutMs, 'connect').catch((error: unknown) => {
    connecting.then(drop, () => undefined); // it may still connect: drop it then
    throw error;
  });
  let answered = false;
  try {
    let arrived: () => void = () => undefined;
    const notified = new Promise<void>((resolve) => (arrived = resolve));
    client.on('notification', (message) => {
      if (message.channel === channel) arrived();
    });
    await bounded(client.query(listenProbeSql(token)), timeoutMs, 'LISTEN');
    await bounded(options.notify.query(notifyProbeSql, [channel]), timeoutMs, 'NOTIFY');
    const sent = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const delivered = await Promise.race([
      notified.then(() => true),
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
    ]);
    clearTimeout(timer);
    const waitedMs = Date.now() - sent;
    // Through a pooler this may run on another server connection than the LISTEN did; the
    // registration left behind hears nothing (no one notifies a probe's channel twice).
    await bounded(client.query(unlistenProbeSql(token)), timeoutMs, 'UNLISTEN').catch(
      () => undefined,
    );
    answered = true;
    return { delivered, waitedMs };
  } finally {
    if (answered) await bounded(client.end(), timeoutMs, 'end').catch(() => drop(client));
    else drop(client);
  }
}

function bounded<T>(promise: Promise<T>, ms: number, step: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`LISTEN probe: no answer to ${step} within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Drops a client without waiting for a server that may not answer. */
function drop(client: ListenClient): void {
  client.end().catch(() => undefined);
  client.connection?.stream?.destroy();
}
