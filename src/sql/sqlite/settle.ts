import { markHeadsReadySql } from './chains.js';

/**
 * The settle of one claim: these statements run in ONE transaction (a D1 `batch()`, a
 * `BEGIN IMMEDIATE` on the SQLite store), in this order
 * — settle, release, mark the next heads — so no claim ever sees an aggregate between them.
 *
 * Fencing: every statement matches `lease_owner = ?1`, the token of this claim. If our lease
 * expired and another run re-claimed a row, nothing here changes it and the newer claim decides.
 * RETURNING lists the rows settled, so the dispatcher can count fenced-off ones. Decisions travel
 * as one JSON parameter, because D1 caps bound parameters per statement at 100.
 */

/**
 * Published rows get `dispatched_at`; retried rows their next `available_at`; dead rows
 * `dead_lettered_at`; all but published rows `last_error`; every row's lease is cleared.
 *
 * `ready` (migration 2): a retried or dead message is the head of its aggregate from now on (every
 * message before it in its run was published, everything after it is released), so it is marked
 * ready — the claim finds it there once it is due again, or once it is replayed. `skip` is a dead
 * letter under the `skip` policy: it leaves its aggregate's chain (`ordered = 0`), and the next
 * statement makes its successor the head.
 *
 * ?1 lease owner, ?2 JSON array of {id, kind: published|retry|dead|skip, error, delayMs},
 * ?3 now (ms).
 */
export const settleSql = `
UPDATE outbox
   SET dispatched_at    = CASE WHEN s.kind = 'published' THEN ?3 ELSE outbox.dispatched_at END,
       dead_lettered_at = CASE WHEN s.kind IN ('dead', 'skip') THEN ?3 ELSE outbox.dead_lettered_at END,
       available_at     = CASE WHEN s.kind = 'retry' THEN ?3 + s.delay_ms ELSE outbox.available_at END,
       last_error       = CASE WHEN s.kind = 'published' THEN outbox.last_error ELSE s.error END,
       ordered          = CASE WHEN s.kind = 'skip' THEN 0 ELSE outbox.ordered END,
       ready            = CASE WHEN s.kind = 'published' THEN outbox.ready ELSE 1 END,
       lease_owner      = NULL,
       lease_expires_at = NULL
  FROM (SELECT json_extract(value, '$.id') AS id,
               json_extract(value, '$.kind') AS kind,
               json_extract(value, '$.error') AS error,
               CAST(json_extract(value, '$.delayMs') AS INTEGER) AS delay_ms
          FROM json_each(?2)) AS s
 WHERE outbox.id = s.id
   AND outbox.lease_owner = ?1
RETURNING outbox.id AS id`;

/**
 * The common case of {@link settleSql}, published rows only, as a plain UPDATE: no JSON objects to
 * take apart per row, no CASE per column — about half the statement's time on a batch of 200
 * (bench/cases/sqlite.ts, `sqlite_dispatch_vs_raw_sql`). `ready` stays as it is, as in settleSql.
 * ?1 lease owner, ?2 JSON array of row ids, ?3 now (ms).
 */
export const settlePublishedSql = `
UPDATE outbox
   SET dispatched_at = ?3, lease_owner = NULL, lease_expires_at = NULL
 WHERE id IN (SELECT value FROM json_each(?2))
   AND lease_owner = ?1
RETURNING id`;

/**
 * Gives back leases on messages this claim never handed to the publisher — the rest of an ordered
 * run after its first failure (they stay behind it, unchanged), or what the time budget left —
 * and the attempt counted for them. Never used for messages whose send may be in flight.
 * ?1 lease owner, ?2 JSON array of row ids.
 */
export const releaseSql = `
UPDATE outbox
   SET lease_owner = NULL, lease_expires_at = NULL, attempts = max(attempts - 1, 0)
 WHERE lease_owner = ?1
   AND id IN (SELECT value FROM json_each(?2))
   AND dispatched_at IS NULL
RETURNING id`;

/**
 * Marks the head of each aggregate whose chain moved (a message published, or dead-lettered under
 * `skip`) ready: its first pending ordered message, found with one seek into `outbox_chain_idx`.
 * Computed after the two statements above, in the same transaction, so it is exact — the next
 * message after a fully published run, the message a run stopped at (already ready), or nothing.
 * No writer can slip in between (SQLite runs one write transaction at a time), which is why D1
 * needs none of the deferral Postgres's settle does.
 * ?1 JSON array of the row ids that left their chain.
 */
export const markNextReadySql = `
${markHeadsReadySql(
  `SELECT DISTINCT o.aggregate_id FROM outbox o WHERE o.id IN (SELECT value FROM json_each(?1))`,
)}`;

/** The parameters of one claim's settle statements, built once for D1 and the SQLite store. */
export interface SettleParameters {
  /** For {@link settleSql} ?2: `{id, kind, error, delayMs}` per row, or none. */
  decisions: { id: number; kind: string; error: string | null; delayMs: number }[];
  /** For {@link releaseSql} ?2. */
  released: number[];
  /** For {@link markNextReadySql} ?1: rows that left their aggregate's chain. */
  leaving: number[];
}

/**
 * Sorts settlements into the three statements. `shadow` settles as published (shadow messages
 * are never written to a SQLite outbox); `dead` under `skip` (`deadLettersBlock: false`) leaves
 * its chain; `defer` (a paused route, a rate limit) goes back like `release` — due again at once,
 * without the attempt its claim counted — because neither SQLite dispatcher has route limits.
 */
export function settleParameters(
  settlements: readonly { rowId: string; kind: string; error?: string; delayMs?: number }[],
  deadLettersBlock: boolean,
): SettleParameters {
  const parameters: SettleParameters = { decisions: [], released: [], leaving: [] };
  for (const s of settlements) {
    const id = Number(s.rowId);
    if (s.kind === 'release' || s.kind === 'defer') {
      parameters.released.push(id);
      continue;
    }
    let kind = s.kind === 'shadow' ? 'published' : s.kind;
    if (kind === 'dead' && !deadLettersBlock) kind = 'skip';
    if (kind === 'published' || kind === 'skip') parameters.leaving.push(id);
    parameters.decisions.push({
      id,
      kind,
      error: s.kind === 'published' || s.kind === 'shadow' ? null : (s.error ?? null),
      delayMs: s.kind === 'retry' ? Math.max(0, Math.round(s.delayMs ?? 0)) : 0,
    });
  }
  return parameters;
}
