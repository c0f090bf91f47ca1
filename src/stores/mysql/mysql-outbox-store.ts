import type { JsonValue } from '../../core/message.js';
import type {
  ClaimRequest,
  OutboxStore,
  SettleRequest,
  SettleResult,
  Settlement,
} from '../../dispatcher/outbox-store.js';
import type { OutgoingMessage } from '../../publishers/publisher.js';
import { addUnorderedTopicsSql } from '../../sql/mysql/chains.js';
import {
  claimCandidatesSql,
  leaseRunsSql,
  leaseSql,
  lockHeadsForParkingSql,
  materializeHeadsSql,
  parkSql,
  runsBehindSql,
} from '../../sql/mysql/claim.js';
import { FLOOR_MARGIN_MS, firstPendingSql, safeTimeSql } from '../../sql/mysql/floor.js';

import {
  advanceHeadsSql,
  deadSql,
  fenceSql,
  publishedSql,
  releaseSql,
  parkedHeadsSql,
  retrySql,
  unparkSql,
} from '../../sql/mysql/settle.js';
import {
  inTransaction,
  selectRows,
  type MysqlPool,
  type MysqlQueryable,
} from './mysql-connection.js';

/** How often a claim moves the floor, at most. */
const FLOOR_INTERVAL_MS = 500;

/** A row of claimCandidatesSql. */
interface CandidateRow {
  id: number;
  message_id: string;
  topic: string;
  aggregate_id: string;
  sequence: number;
  ordered: number;
  payload: string;
  headers: string;
  created_at: number;
  attempts: number;
  /** 1 when claimable now; 0 or null: a row to park (claim.ts). */
  head: number | null;
}

/**
 * Rows one claim may park at most (claim.ts, parked rows) before it returns what it has: bounds
 * one claim's time when a deep backlog behind blocked heads is first met; the next claims park
 * the rest. A claim that parks runs rounds of {@link PARK_ROUND} rows after its first.
 */
const PARK_BUDGET = 20_000;
const PARK_ROUND = 1_000;

/**
 * The dispatcher's {@link OutboxStore} on MySQL 8 / MariaDB 10.6+ (mysql2 pool): claims with
 * `FOR UPDATE SKIP LOCKED` and a lease in one short transaction (src/sql/mysql/claim.ts),
 * settles fenced by the claim's lease token with the aggregates' heads moved in the same
 * transaction (src/sql/mysql/settle.ts). Several dispatcher processes may share a database.
 * Settles never defer: writers never touch `outbox_heads`.
 */
export class MysqlOutboxStore implements OutboxStore {
  readonly #pool: MysqlPool;
  /**
   * Aggregate of each row this store claimed and has not settled yet, for the settle's fast path
   * (no fencing read first). Claims whose settle failed never remove their rows; forgetting them
   * all is safe (the general path reads them again).
   */
  readonly #claimed = new Map<string, string>();
  /**
   * The claims' floor (src/sql/mysql/floor.ts): epoch ms below which nothing is pending and nothing
   * can enter the claim's range. In memory: 0 when the store starts, so its first claim walks once.
   */
  #floor = 0;
  /** When {@link #moveFloor} last ran (ms, this process's clock). */
  #floorMovedAt = 0;
  /** Why the store uses no floor (no PROCESS privilege), once known; the floor then stays 0. */
  #noFloor: string | undefined;
  /** Recording the dispatcher's unordered topic patterns, once, before its first claim. */
  #recorded: Promise<void> | undefined;
  readonly #patterns: readonly string[];

  /**
   * `unorderedTopicPatterns`: LIKE patterns recorded in `outbox_unordered_topics` before the
   * first claim (the dispatcher's `unorderedTopics`, src/sql/mysql/chains.ts).
   */
  constructor(pool: MysqlPool, options: { unorderedTopicPatterns?: readonly string[] } = {}) {
    this.#pool = pool;
    this.#patterns = options.unorderedTopicPatterns ?? [];
  }

  async claim(request: ClaimRequest): Promise<OutgoingMessage[]> {
    if (this.#patterns.length > 0) {
      this.#recorded ??= (async () => {
        for (const pattern of this.#patterns)
          await this.#pool.query(addUnorderedTopicsSql, [pattern]);
      })();
      // A failed recording is tried again by the next claim.
      await this.#recorded.catch((error: unknown) => {
        this.#recorded = undefined;
        throw error;
      });
    }
    // Rounds of one short transaction each: a round that met rows to park and left the batch
    // short runs again (the parked rows and the ones leased by earlier rounds are out of its
    // range by then), so a claim returns the due heads behind a backlog it parks rather than an
    // empty batch (the dispatcher sleeps a poll interval after one).
    const rows: CandidateRow[] = [];
    let parked = 0;
    for (let round = 0; ; round++) {
      const limit = round === 0 ? request.batchSize : Math.max(request.batchSize, PARK_ROUND);
      let next: { heads: CandidateRow[]; parked: number };
      try {
        next = await inTransaction(this.#pool, async (connection) => {
          const found = await selectRows<CandidateRow>(connection, claimCandidatesSql, [
            this.#floor,
            limit,
          ]);
          const heads = found
            .filter((c) => Number(c.head) === 1)
            .slice(0, request.batchSize - rows.length);
          if (heads.length > 0)
            await connection.query(leaseSql, [
              request.owner,
              request.leaseMs,
              heads.map((c) => c.id),
            ]);
          const parkedHere = await park(
            connection,
            found.filter((c) => Number(c.head) !== 1 && Number(c.ordered) === 1),
          );
          // A full round that parked nothing: what blocks it cannot be parked now (heads not
          // settled yet, or being settled), and another round would read the same rows.
          return { heads, parked: found.length < limit ? 0 : parkedHere };
        });
      } catch (error) {
        // Earlier rounds' leases are committed: hand those rows on rather than strand them.
        if (rows.length > 0) break;
        throw error;
      }
      rows.push(...next.heads);
      parked += next.parked;
      if (rows.length >= request.batchSize || next.parked === 0 || parked >= PARK_BUDGET) break;
    }
    rows.push(...(await this.#runs(request, rows)));
    // At most every FLOOR_INTERVAL_MS: a floor stays safe once computed (floor.ts), so a claim
    // between two moves scans from an older, lower floor; three small reads per claim cost a
    // busy dispatcher ~5 % of its rate for nothing.
    if (Date.now() - this.#floorMovedAt >= FLOOR_INTERVAL_MS) {
      this.#floorMovedAt = Date.now();
      await this.#moveFloor();
    }
    if (this.#claimed.size > 100_000) this.#claimed.clear();
    for (const row of rows) this.#claimed.set(String(row.id), row.aggregate_id);
    return rows.map((row) => ({
      id: row.message_id,
      rowId: String(row.id),
      topic: row.topic,
      aggregateId: row.aggregate_id,
      sequence: Number(row.sequence),
      ...(Number(row.ordered) === 0 ? { ordered: false } : {}),
      payload: JSON.parse(row.payload) as JsonValue,
      headers: JSON.parse(row.headers) as Record<string, string>,
      createdAt: new Date(Number(row.created_at)),
      attempts: Number(row.attempts) + 1,
    }));
  }

  /**
   * Settles the rows `owner` still holds, in one transaction: fence, one UPDATE per kind, then
   * the heads of the aggregates whose chain may have moved (src/sql/mysql/settle.ts).
   */
  async settle(
    owner: string,
    settlements: readonly Settlement[],
    request: Pick<SettleRequest, 'deadLettersBlock'> = { deadLettersBlock: true },
  ): Promise<SettleResult> {
    const ids = settlements.map((s) => Number(s.rowId));
    if (ids.length === 0) return { settled: [], deferred: [] };
    const aggregates = settlements.map((s) => this.#claimed.get(s.rowId));
    for (const s of settlements) this.#claimed.delete(s.rowId);
    if (settlements.every((s) => s.kind === 'published') && !aggregates.includes(undefined)) {
      const settled = await this.#settleAllPublished(owner, ids, aggregates as string[]);
      if (settled) return { settled: settlements.map((s) => s.rowId), deferred: [] };
    }
    const settled = await inTransaction(this.#pool, async (connection) => {
      const fenced = await selectRows<{ id: number; aggregate_id: string; ordered: number }>(
        connection,
        fenceSql,
        [ids, owner],
      );
      const held = new Map(fenced.map((row) => [String(row.id), row]));
      const published: number[] = [];
      const released: number[] = [];
      const retried = new Map<string, number[]>();
      const moved = new Set<string>();
      const done: string[] = [];
      for (const s of settlements) {
        const row = held.get(s.rowId);
        if (!row) continue;
        done.push(s.rowId);
        const unordered = Number(row.ordered) === 0;
        // An unordered message may be the row its aggregate's head waits on (schema.ts): any
        // settle of it moves the head on.
        if (unordered) moved.add(row.aggregate_id);
        if (s.kind === 'published' || s.kind === 'shadow') {
          published.push(row.id);
          moved.add(row.aggregate_id);
        } else if (s.kind === 'release' || s.kind === 'defer') {
          // No route limits on MySQL: a deferral goes back like a release, due at once.
          released.push(row.id);
        } else if (s.kind === 'retry') {
          const key = JSON.stringify([Math.max(0, Math.round(s.delayMs)), s.error]);
          retried.set(key, [...(retried.get(key) ?? []), row.id]);
        } else {
          const skip = !request.deadLettersBlock;
          await connection.query(deadSql, [s.error, skip ? 1 : 0, [row.id]]);
          if (skip) moved.add(row.aggregate_id);
        }
      }
      if (published.length > 0) await connection.query(publishedSql, [published, owner]);
      for (const [key, rowIds] of retried) {
        const [delayMs, error] = JSON.parse(key) as [number, string];
        await connection.query(retrySql, [delayMs, error, rowIds]);
      }
      if (released.length > 0) await connection.query(releaseSql, [released, owner]);
      if (moved.size > 0) await advanceHeads(connection, [...moved].sort());
      return done;
    });
    return { settled, deferred: [] };
  }

  /**
   * The common settle — every row published, every aggregate known from the claim — in three
   * statements: the published UPDATE (fenced by itself) and the heads. False, with nothing
   * changed, when a row was fenced off: the caller then takes the general path, which finds out
   * which.
   */
  async #settleAllPublished(owner: string, ids: number[], aggregates: string[]): Promise<boolean> {
    const fenced = new Error('fenced');
    try {
      await inTransaction(this.#pool, async (connection) => {
        const [header] = await connection.query(publishedSql, [ids, owner]);
        if ((header as { affectedRows: number }).affectedRows !== ids.length) throw fenced;
        await advanceHeads(connection, [...new Set(aggregates)].sort());
      });
      return true;
    } catch (error) {
      if (error === fenced) return false;
      throw error;
    }
  }

  /**
   * The runs behind the ordered heads of `heads` (src/sql/mysql/claim.ts `runsBehindSql`): the
   * batch left is shared evenly between them (rounded down: never more than the batch). Leased
   * in one transaction with their heads' expiry renewed. A failure here (rolled back) returns no
   * run rather than an error: the heads' leases are committed already, and failing the claim would
   * strand them until they expire.
   */
  async #runs(request: ClaimRequest, heads: readonly CandidateRow[]): Promise<CandidateRow[]> {
    const ordered = heads.filter((h) => Number(h.ordered) === 1);
    if (ordered.length === 0) return [];
    const share = Math.floor((request.batchSize - heads.length) / ordered.length);
    if (share < 1) return [];
    try {
      return await inTransaction(this.#pool, async (connection) => {
        const values = ordered.flatMap((h) => [h.aggregate_id, Number(h.sequence), share]);
        type RunRow = CandidateRow & { free: number | null };
        const locked = new Map(
          (await selectRows<RunRow>(connection, runsBehindSql(ordered.length, true), values)).map(
            (row) => [row.id, row],
          ),
        );
        const committed = await selectRows<RunRow>(
          connection,
          runsBehindSql(ordered.length, false),
          values,
        );
        const byAggregate = new Map<string, RunRow[]>();
        for (const row of committed)
          byAggregate.set(row.aggregate_id, [...(byAggregate.get(row.aggregate_id) ?? []), row]);
        const run: CandidateRow[] = [];
        for (const chain of byAggregate.values()) {
          chain.sort((a, b) => Number(a.sequence) - Number(b.sequence));
          // The committed chain up to its first row this claim could not lock or cannot send
          // now: nothing after a gap (src/sql/mysql/claim.ts).
          for (const row of chain) {
            const mine = locked.get(row.id);
            if (!mine || Number(mine.free) !== 1) break;
            run.push(mine);
          }
        }
        if (run.length === 0) return [];
        const runIds = run.map((r) => r.id);
        const withHeads = [...ordered.map((h) => h.id), ...runIds];
        const [header] = await connection.query(leaseRunsSql, [
          request.owner,
          request.leaseMs,
          runIds,
          withHeads,
          request.owner,
          runIds,
        ]);
        // A head no longer ours (its lease ran out meanwhile): no run at all this time.
        if ((header as { affectedRows: number }).affectedRows !== withHeads.length)
          throw new Error('a head of the runs is no longer this claim’s');
        return run;
      });
    } catch {
      return [];
    }
  }

  /**
   * The floor under the claims' scan (src/sql/mysql/floor.ts), as it stands: 0 until a claim moved
   * it, and always 0 without the PROCESS privilege. For tests and diagnostics.
   * @internal
   */
  get claimFloor(): number {
    return this.#floor;
  }

  /**
   * Moves the floor after a claim: the minimum of SAFE, the first pending key read dirty and the
   * first read committed, in that order (src/sql/mysql/floor.ts says why that order and why it
   * loses no message). A failure leaves the floor where it is (it was safe, and stays so); a
   * missing PROCESS privilege turns the floor off for good.
   */
  async #moveFloor(): Promise<void> {
    if (this.#noFloor !== undefined) return;
    try {
      const [safeRow] = await inTransaction(this.#pool, (connection) =>
        selectRows<{ now_ms: number; running_s: number | null; writer_ms: number | null }>(
          connection,
          safeTimeSql,
        ),
      );
      if (!safeRow) return;
      const now = Number(safeRow.now_ms);
      let safe = now;
      if (safeRow.running_s !== null)
        safe = Math.min(safe, now - (Number(safeRow.running_s) + 1) * 1000);
      if (safeRow.writer_ms !== null) safe = Math.min(safe, Number(safeRow.writer_ms));
      safe -= FLOOR_MARGIN_MS;
      const from = this.#floor;
      const first = async (readUncommitted: boolean) => {
        const [row] = await inTransaction(
          this.#pool,
          (connection) => selectRows<{ first_key: number }>(connection, firstPendingSql, [from]),
          { readUncommitted },
        );
        // No row: nothing pending from the floor on, and only SAFE bounds the floor.
        return row === undefined ? Infinity : Number(row.first_key);
      };
      const dirty = await first(true);
      const committed = await first(false);
      const next = Math.min(safe, dirty, committed);
      // Safe values stay safe (floor.ts), so two claims racing keep the higher one.
      if (Number.isFinite(next) && next > this.#floor) this.#floor = next;
    } catch (error) {
      const errno = (error as { errno?: number }).errno;
      // ER_SPECIFIC_ACCESS_DENIED_ERROR (1227), ER_DBACCESS_DENIED_ERROR (1044),
      // ER_TABLEACCESS_DENIED_ERROR (1142): INNODB_TRX needs the PROCESS privilege.
      if (errno === 1227 || errno === 1044 || errno === 1142) {
        this.#noFloor = (error as Error).message;
        this.#floor = 0;
        process.emitWarning(
          `agent-outbox: the MySQL claim runs without a floor (grant PROCESS to the dispatcher's user to have one): ${this.#noFloor}`,
          { code: 'OUTBOX_MYSQL_NO_FLOOR' },
        );
      }
    }
  }

  async release(owner: string, rowIds: readonly string[]): Promise<void> {
    if (rowIds.length === 0) return;
    for (const rowId of rowIds) this.#claimed.delete(rowId);
    await this.#pool.query(releaseSql, [rowIds.map(Number), owner]);
  }
}

/**
 * Parks `rows` (non-heads the claim's SELECT returned and holds) of aggregates whose
 * `outbox_heads` row this transaction can lock, when they are not that head
 * (src/sql/mysql/claim.ts). Returns how many it parked.
 */
async function park(connection: MysqlQueryable, rows: readonly CandidateRow[]): Promise<number> {
  if (rows.length === 0) return 0;
  const aggregates = [...new Set(rows.map((r) => r.aggregate_id))].sort();
  await connection.query(materializeHeadsSql, [aggregates]);
  const heads = new Map(
    (
      await selectRows<{ aggregate_id: string; next_sequence: number }>(
        connection,
        lockHeadsForParkingSql,
        [aggregates],
      )
    ).map((h) => [h.aggregate_id, Number(h.next_sequence)]),
  );
  const ids = rows
    .filter((r) => {
      const head = heads.get(r.aggregate_id);
      return head !== undefined && head !== Number(r.sequence);
    })
    .map((r) => r.id);
  if (ids.length > 0) await connection.query(parkSql, [ids]);
  return ids.length;
}

/**
 * Moves the heads of `aggregates` (sorted: settles lock them in one order) and puts the rows at
 * the new heads back in the claim's range (src/sql/mysql/settle.ts).
 */
async function advanceHeads(connection: MysqlQueryable, aggregates: string[]): Promise<void> {
  const [header] = await connection.query(advanceHeadsSql, [aggregates]);
  // No heads row written or moved (aggregates of unordered messages only, or heads that stayed):
  // no row became a head, so none to unpark — a claim never parks a head (claim.ts).
  if ((header as { affectedRows: number }).affectedRows === 0) return;
  const parked = await selectRows<{ id: number }>(connection, parkedHeadsSql, [aggregates]);
  if (parked.length > 0) await connection.query(unparkSql, [parked.map((r) => r.id)]);
}
