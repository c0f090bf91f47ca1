/**
 * Whether a client is inside a transaction, from what the client already knows: no round trip,
 * so `enqueue()` is no slower for the check (each adapter's `outsideTransaction`, read by the
 * writer; see SqlExecutor).
 *
 * Why not ask the server in SQL: Postgres has no function that says "this session is in a
 * transaction block". `pg_current_xact_id_if_assigned()` is NULL until the transaction writes,
 * so it answers "no" right after `BEGIN`; `transaction_timestamp() <> statement_timestamp()` is
 * false for the first statement of a multi-statement string and true for the second statement of
 * a pipelined implicit transaction; `SAVEPOINT` (which errors outside a block) is a statement of
 * its own, a round trip, and changes the caller's transaction. What does know is the protocol:
 * every ReadyForQuery message carries the session's transaction status (`I` idle, `T` in a
 * block, `E` in a failed block). `pg` keeps the last one and exposes it as
 * `client.getTransactionStatus()` (pg 8.21+; `null` on pg-native); postgres.js, Prisma, Kysely, Drizzle and PGlite
 * each tell their transaction object from their top-level one by its type.
 *
 * The answers are conservative: `undefined` (let the write through, as before) whenever the
 * client cannot tell — an older `pg` without `getTransactionStatus`, a `pg` client with queries
 * still queued or in flight (its last status is stale: pipeline mode, or calls not awaited), a
 * postgres.js reserved connection, a wrapper of unknown shape. A refusal is only ever given for
 * a write that would certainly have committed alone.
 */

/** The reason a `pg` Pool is refused. */
export const PG_POOL_REASON =
  "fromPg() was given a pg Pool: each pool.query() runs on whichever connection is free and commits by itself, so these messages would not be part of your business transaction. Take a client (const client = await pool.connect()), run client.query('BEGIN'), write your rows and enqueue on fromPg(client), then COMMIT and client.release().";

/** The reason a `pg` client outside `BEGIN` is refused. */
export const PG_IDLE_REASON =
  "fromPg() was given a pg client that is not inside a transaction (no BEGIN, or it already ran COMMIT/ROLLBACK): the insert would commit by itself. Run client.query('BEGIN') first, write your rows and enqueue, then client.query('COMMIT').";

/**
 * The part of a `pg` Client / PoolClient / Pool this module reads. All optional: a structural
 * look at what the object has.
 */
interface PgLike {
  getTransactionStatus?: () => string | null;
  readyForQuery?: boolean;
  connect?: unknown;
  totalCount?: unknown;
}

/**
 * Why `client` (a `pg` Client, PoolClient or Pool) would autocommit, or `undefined`.
 *
 * A Pool is recognised by its pool counters (`totalCount`) and `connect`, which a Client lacks:
 * every `pool.query()` is a transaction of its own. A client is outside a transaction when it is
 * idle (`readyForQuery`: nothing queued or in flight, so the status is the current one) and its
 * last ReadyForQuery said `I`. `T` and `E` pass: in a failed block the server itself refuses the
 * insert ("current transaction is aborted").
 */
export function pgOutsideTransaction(client: unknown): string | undefined {
  if (typeof client !== 'object' || client === null) return undefined;
  const pg = client as PgLike;
  if (typeof pg.getTransactionStatus === 'function') {
    if (pg.readyForQuery !== true) return undefined;
    return pg.getTransactionStatus() === 'I' ? PG_IDLE_REASON : undefined;
  }
  if (typeof pg.connect === 'function' && typeof pg.totalCount === 'number') return PG_POOL_REASON;
  return undefined;
}

/** The reason a postgres.js top-level `sql` is refused. */
export const POSTGRES_JS_REASON =
  'fromPostgresJs() was given the top-level sql of postgres(), whose queries each run on a pooled connection and commit by themselves. Enqueue inside sql.begin(async (tx) => { ... }) on fromPostgresJs(tx).';

/**
 * Why a postgres.js object would autocommit, or `undefined`. `sql.begin`'s `tx` (and a
 * savepoint's) has `savepoint`; a reserved connection (`sql.reserve()`) has `release` and may be
 * inside a `BEGIN` the caller ran: it cannot tell. The top-level `sql` has `begin` and neither.
 */
export function postgresJsOutsideTransaction(sql: unknown): string | undefined {
  if (typeof sql !== 'function' && (typeof sql !== 'object' || sql === null)) return undefined;
  const s = sql as { savepoint?: unknown; release?: unknown; begin?: unknown };
  if (typeof s.savepoint === 'function' || typeof s.release === 'function') return undefined;
  return typeof s.begin === 'function' ? POSTGRES_JS_REASON : undefined;
}
