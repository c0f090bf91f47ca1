import { NOW_MS } from './clock.js';

/**
 * The claim's floor on MySQL/MariaDB: a claim that does not walk what a held snapshot keeps from
 * purge (the Postgres store's lane, src/sql/lane.ts, with the same reasoning and a different
 * SAFE time).
 *
 * The problem. The claim (claim.ts) reads `outbox_claim_idx`
 * `(dispatched_at, dead_lettered_at, parked, available_at, id)` from the low end of the pending
 * range. A settle takes a row out of that range by writing its secondary index entry anew; the
 * old entry is delete-marked, and InnoDB's purge cannot remove it while a read view older than
 * the change is open (a REPEATABLE READ report, `mysqldump --single-transaction`). Those entries
 * sort first (the oldest `available_at`), so every claim stepped over every message dispatched
 * since the snapshot was taken: 5,000 messages took a claim from 101 to ~10,100 page accesses
 * (test/integration/stores/mysql/mysql-claim-bound.test.ts, (c)).
 *
 * The floor. Every key that enters the pending range is `available_at` no earlier than the
 * START of the statement that writes it (`NOW(3)`, clock.ts: MariaDB and MySQL fix it when the
 * statement starts): the insert trigger's default, the writer's `now + delay` and its absolute
 * times (clamped to now, enqueue.ts), a retry's `now + delay`, a replay's `now` (admin.ts), an
 * unpark's `GREATEST(available_at, now)` (settle.ts). So the claim may start its scan at a FLOOR
 * below which nothing pending is left, and the delete-marked entries below it are never read. A
 * store keeps its floor in memory ({@link MysqlOutboxStore}): 0 when it starts (its first claim
 * walks once), then after each claim the minimum of three values, all read after each other in
 * this order:
 *
 * 1. SAFE ({@link safeTimeSql}): no statement still running, and no transaction still open that
 *    wrote, can have written or write a key below it. The server's now (statement start), the
 *    start of every statement running on another connection (`PROCESSLIST`, `TIME` in whole
 *    seconds: start ≥ now − (TIME + 1) s), the start of every open InnoDB transaction that
 *    modified a row (`INNODB_TRX.trx_rows_modified > 0`, `trx_started` in whole seconds,
 *    truncated), minus {@link FLOOR_MARGIN_MS}.
 * 2. The first pending key from the current floor read dirty (READ UNCOMMITTED,
 *    {@link firstPendingSql}): rows written by transactions not committed yet.
 * 3. The same read committed (READ COMMITTED): rows committed pending, a row whose settle or
 *    dead-lettering is not committed yet included (a rolled-back settle puts it back). Leased and
 *    not-yet-due rows are pending: whatever their lease, `available_at` is in the range.
 *
 * Why no message is lost (G2). Take a row that a claim after this one must find, with key k below
 * the new floor. It was not committed pending at (3), else (3) ≤ k. So a transaction W not
 * committed at (3) wrote its pending version, in a statement S that started at k (or later, and
 * k ≥ its start). k < SAFE ≤ the time of (1), so S started before (1): if S was still running at
 * (1), PROCESSLIST listed it and SAFE ≤ its start ≤ k — no. So S ended before (1), its write was
 * in place at (2), W still open: the dirty read saw the row pending at k — no. (This library's
 * statements never change a row their own transaction wrote, so the version (2) sees is the one
 * W commits.) INNODB_TRX adds a second guard for the same case: W wrote, so SAFE ≤ its start,
 * and its statements started after its start, give or take the margin (a first statement can
 * wait on a metadata lock before InnoDB starts the transaction, so the dirty read is what covers
 * a wait longer than the margin).
 *
 * Why a held snapshot does not hold the floor back: a transaction that wrote nothing
 * (`trx_rows_modified = 0`) and runs no statement (PROCESSLIST `Sleep`) has no key in flight,
 * and any statement it runs later starts after (1), so its keys are above SAFE. What holds the
 * floor back is what should: a transaction that wrote and stays open, a statement that runs
 * long (a report's long SELECT too, while it runs), and a pending row (a lease that stays taken,
 * a retry backing off keeps the floor at its key: it is pending).
 *
 * Privilege: INNODB_TRX needs PROCESS, and without it PROCESSLIST shows only the session's own
 * threads. When (1) fails for want of it, the store uses no floor at all (floor 0: the claim as
 * before, walking what a held snapshot keeps) and says so once with a process warning.
 *
 * The server's clock stepping back would give new rows keys below the floor. The floor lives in
 * the dispatcher's memory, so a restart of the dispatcher resets it to 0; a step back while a
 * dispatcher runs (NTP slews, it does not step, unless told to) delays such rows until then.
 * Sessions that `SET TIMESTAMP` (a replica's applier) fix `NOW()` themselves: a dispatcher runs
 * against the primary.
 */

/**
 * Margin under SAFE (ms): `trx_started` and PROCESSLIST `TIME` are whole seconds, and a statement
 * passes some time between its start and InnoDB's start of its transaction.
 */
export const FLOOR_MARGIN_MS = 2_000;

/**
 * (1) above: the server's now, the longest-running statement on another connection (seconds),
 * and the oldest start of an open transaction that modified a row (ms). Information-schema
 * tables, no lock taken; errors without the PROCESS privilege (INNODB_TRX). Replication and
 * background threads (`Binlog Dump`, `Daemon`, `Slave_*`) run for days and write no outbox key.
 */
export const safeTimeSql = `
SELECT ${NOW_MS} AS now_ms,
       (SELECT MAX(p.TIME) FROM information_schema.PROCESSLIST p
         WHERE p.ID <> CONNECTION_ID()
           AND p.COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump', 'Binlog Dump GTID')
           AND p.COMMAND NOT LIKE 'Slave%') AS running_s,
       (SELECT CAST(MIN(UNIX_TIMESTAMP(t.trx_started)) * 1000 AS SIGNED)
          FROM information_schema.INNODB_TRX t
         WHERE t.trx_rows_modified > 0) AS writer_ms`;

/**
 * (2) and (3) above: the first key of the pending range from the floor ?, whatever the rows'
 * leases and due times: one descent of `outbox_claim_idx` to the floor and a step over the dead
 * entries up to the first live one (ANALYZE: a range, one row read; the pages are those dead
 * entries, which is why it starts at the floor too; a consistent read of the index alone, it steps over them without the claim's clustered-index visit per entry). `ORDER BY ... LIMIT 1`, not `MIN()`: the
 * same read, but `MIN()` is done by the optimizer ("Select tables optimized away"), where
 * ANALYZE does not count its pages and the claim-bound test could not check them.
 */
export const firstPendingSql = `
SELECT o.available_at AS first_key
  FROM outbox o FORCE INDEX (outbox_claim_idx)
 WHERE o.dispatched_at IS NULL
   AND o.dead_lettered_at IS NULL
   AND o.parked = 0
   AND o.available_at >= ?
 ORDER BY o.available_at
 LIMIT 1`;
