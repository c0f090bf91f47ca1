import type { DeadLetter } from '../admin/dead-letters.js';
import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { JsonValue } from '../core/message.js';
import { globToLike } from '../dispatcher/topic-patterns.js';
import {
  laneStatusSql,
  listLaneDeadSql,
  replayLaneDeadSql,
  skipLaneDeadSql,
} from '../sql/lane-admin.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * A dead letter of the lanes engine: {@link DeadLetter}'s fields, `id` as `<lane>:<id>` (a lane
 * message's key), and its payload.
 */
export interface LaneDeadLetter extends DeadLetter {
  payload: JsonValue;
  /**
   * Whether it holds its aggregate's later messages back: an ordered message dead-lettered under
   * `hold`. Such a one can be skipped ({@link skipLaneDeadLetters}); one dead under `skip`, or
   * unordered, holds nothing.
   */
  blocking: boolean;
}

/**
 * Lists the lanes engine's dead letters, oldest first (default at most 100). `topic` is a glob
 * (`payment.*`).
 *
 * @example
 * ```ts
 * for (const dead of await listLaneDeadLetters(fromPg(pool)))
 *   console.log(dead.messageId, dead.attempts, dead.lastError);
 * ```
 */
export async function listLaneDeadLetters(
  executor: SqlExecutor,
  options: { schema?: string; limit?: number; topic?: string } = {},
): Promise<LaneDeadLetter[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const limit = options.limit ?? 100;
  if (!Number.isInteger(limit) || limit < 1)
    throw new OutboxValidationError('limit', `must be a positive integer, got ${String(limit)}`);
  const { rows } = await executor.query<LaneDeadLetter & { sequence: string }>(
    listLaneDeadSql(schema),
    [options.topic ? globToLike(options.topic) : null, limit],
  );
  return rows.map((r) => ({
    ...r,
    sequence: Number(r.sequence),
    attempts: Number(r.attempts),
    createdAt: new Date(r.createdAt),
    deadLetteredAt: new Date(r.deadLetteredAt),
  }));
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Makes dead letters of the lanes engine due again: attempts 0, due now, same message id (so
 * consumers still deduplicate). Without `messageIds`, every dead letter (of `topic`, a glob, when
 * given). Under the `hold` policy a replayed message is still its aggregate's head and goes
 * first; under `skip` its aggregate went on without it, and it is published on its own. Returns
 * what was replayed; ids that are not dead letters are left alone (absent from the result).
 *
 * @example
 * ```ts
 * const replayed = await replayLaneDeadLetters(fromPg(pool), { messageIds: [dead.messageId] });
 * ```
 */
export async function replayLaneDeadLetters(
  executor: SqlExecutor,
  options: { schema?: string; messageIds?: readonly string[]; topic?: string } = {},
): Promise<{ id: string; messageId: string; topic: string }[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const ids = options.messageIds;
  if (ids !== undefined) {
    if (ids.length === 0)
      throw new OutboxValidationError(
        'messageIds',
        'give at least one message id, or leave messageIds out to replay every dead letter',
      );
    for (const id of ids)
      if (!UUID.test(id))
        throw new OutboxValidationError('messageIds', `"${id}" is not a message id (UUID)`);
  }
  const { rows } = await executor.query<{ id: string; messageId: string; topic: string }>(
    replayLaneDeadSql(schema),
    [
      (ids ?? []).map((id) => id.toLowerCase()),
      ids === undefined,
      options.topic ? globToLike(options.topic) : null,
    ],
  );
  return rows;
}

/**
 * Skips dead letters of the lanes engine that hold their aggregate back (dead-lettered under
 * `hold`): each is given up as if it had died under `skip`. It is never published (it stays a
 * dead letter, listed with `blocking: false`; a later replay publishes it on its own), and its
 * aggregate's later messages go out in order, from the next parked one, which is due at once
 * (a running dispatcher finds it at its next look at the parked messages, at its poll
 * cadence). Returns what was skipped; ids that are not blocking dead letters are left alone
 * (absent from the result).
 *
 * @example
 * ```ts
 * const skipped = await skipLaneDeadLetters(fromPg(pool), { messageIds: [dead.messageId] });
 * ```
 */
export async function skipLaneDeadLetters(
  executor: SqlExecutor,
  options: { schema?: string; messageIds: readonly string[] },
): Promise<{ id: string; messageId: string; topic: string; aggregateId: string }[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const ids = options.messageIds;
  if (!Array.isArray(ids) || ids.length === 0)
    throw new OutboxValidationError('messageIds', 'give at least one message id to skip');
  for (const id of ids)
    if (typeof id !== 'string' || !UUID.test(id))
      throw new OutboxValidationError('messageIds', `"${String(id)}" is not a message id (UUID)`);
  const { rows } = await executor.query<{
    id: string;
    messageId: string;
    topic: string;
    aggregateId: string;
  }>(skipLaneDeadSql(schema), [ids.map((id) => id.toLowerCase())]);
  return rows;
}

/** One lane of {@link LaneStatus}. */
export interface LaneState {
  lane: number;
  /** The last id consumed (bigint as text). */
  cursor: string;
  /** The dispatcher that took the lane last, while its lease lasts and after (see `leased`). */
  owner: string | null;
  leaseExpiresAt: Date | null;
  /** Whether the lease is live now (by the database's clock): nobody else can take the lane. */
  leased: boolean;
  /**
   * Messages after the cursor, not parked: read by the next batches of the lane's owner. While
   * an older writer's transaction runs, this includes what was published above the cursor
   * already (the cursor waits for the horizon).
   */
  backlog: number;
  /** Age of the first message after the cursor, in seconds (0 when none). */
  oldestBacklogAgeSeconds: number;
  /** Parked behind a failed message of their aggregate, waiting for it (ordered topics). */
  parked: number;
  /** Parked heads, not dead: failures waiting for their retry (or given back unsent, due). */
  retrying: number;
  /**
   * Held messages parked (migration 027): waiting for a decision, or rejected (or expired) under
   * `hold`, blocking their aggregate. Not in `parked` nor `retrying`: they are not pending.
   */
  held: number;
  deadLetters: number;
}

/** The lanes engine at a glance: each lane, and the sums. */
export interface LaneStatus {
  lanes: LaneState[];
  total: {
    backlog: number;
    oldestBacklogAgeSeconds: number;
    parked: number;
    retrying: number;
    held: number;
    deadLetters: number;
    /** Lanes under a live lease. */
    leasedLanes: number;
    /** Distinct owners of live leases. */
    owners: number;
  };
}

/**
 * Reads {@link LaneStatus} in one statement. The backlog is counted per lane from its cursor
 * through the primary key, so the cost follows the backlog, not the messages ever written.
 *
 * @example
 * ```ts
 * const { total } = await laneStatus(fromPg(pool));
 * if (total.backlog > 1_000) alert(`lanes backlog ${total.backlog}`);
 * ```
 */
export async function laneStatus(
  executor: SqlExecutor,
  options: { schema?: string } = {},
): Promise<LaneStatus> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<LaneState>(laneStatusSql(schema));
  const lanes = rows.map((r) => ({
    ...r,
    lane: Number(r.lane),
    leaseExpiresAt: r.leaseExpiresAt === null ? null : new Date(r.leaseExpiresAt),
    oldestBacklogAgeSeconds: Number(r.oldestBacklogAgeSeconds),
  }));
  const sum = (key: 'backlog' | 'parked' | 'retrying' | 'held' | 'deadLetters') =>
    lanes.reduce((n, l) => n + l[key], 0);
  const live = lanes.filter((l) => l.leased);
  return {
    lanes,
    total: {
      backlog: sum('backlog'),
      oldestBacklogAgeSeconds: Math.max(0, ...lanes.map((l) => l.oldestBacklogAgeSeconds)),
      parked: sum('parked'),
      retrying: sum('retrying'),
      held: sum('held'),
      deadLetters: sum('deadLetters'),
      leasedLanes: live.length,
      owners: new Set(live.map((l) => l.owner)).size,
    },
  };
}
