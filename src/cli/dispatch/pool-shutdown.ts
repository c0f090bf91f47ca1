import type pg from 'pg';

/** A pooled client's socket, as `pg` keeps it (not part of its typed API). */
interface WithSocket {
  connection?: { stream?: { destroy(): void } };
}

/** Default grace {@link endPoolBounded} gives connections to close before destroying them. */
export const POOL_END_GRACE_MS = 2_000;

/**
 * Ends `pool` within about `graceMs`, whatever state its connections are in: `pool.end()`, then
 * every connection that has not closed by then is destroyed.
 *
 * `pg` ends an idle connection gracefully: it sends Terminate, half-closes the socket and waits
 * for the server to close its side. Over a connection a network partition froze (nothing reset,
 * see docs/failure-handling.md) that never happens: the socket stays open, and so does the
 * process, until TCP keepalive gives up — minutes over a real network, never when the peer's
 * kernel still acknowledges the probes (test/chaos/partition.test.ts). The pool's idle timeout
 * ends such connections the same way while the dispatcher runs, so by a stop after a partition
 * several can be waiting. A connection ended while a statement was in flight (a statement that
 * timed out) is already destroyed by `pg` itself.
 *
 * Call {@link trackPoolConnections} right after creating the pool, before it opens any.
 */
export async function endPoolBounded(
  pool: pg.Pool,
  open: ReadonlySet<pg.PoolClient>,
  graceMs = POOL_END_GRACE_MS,
): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const grace = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
  const closed = Promise.all([
    pool.end().catch(() => undefined),
    ...[...open].map(
      (client) =>
        new Promise<void>((resolve) => (client as unknown as pg.Client).once('end', resolve)),
    ),
  ]);
  await Promise.race([closed, grace]);
  clearTimeout(timer);
  for (const client of open) (client as WithSocket).connection?.stream?.destroy();
}

/**
 * The pool's connections that are open: added when the pool connects one, removed when it has
 * closed (its socket, not just its `end()` call). What {@link endPoolBounded} destroys.
 */
export function trackPoolConnections(pool: pg.Pool): ReadonlySet<pg.PoolClient> {
  const open = new Set<pg.PoolClient>();
  pool.on('connect', (client) => {
    open.add(client);
    // pg emits 'end' on the client when its socket has closed, whoever closed it.
    (client as unknown as pg.Client).once('end', () => open.delete(client));
  });
  return open;
}

/**
 * Waits for `work` (its outcome ignored) at most `ms`: for a shutdown step whose statements may
 * sit on a frozen connection with no timeout of their own (a retention run), which
 * {@link endPoolBounded} then destroys.
 */
export async function settleWithin(work: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    work.catch(() => undefined),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]);
  clearTimeout(timer);
}
