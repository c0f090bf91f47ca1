import { OutboxValidationError } from '../core/errors.js';
import { globToSqliteGlob, sqliteGlobToGlob } from '../sql/sqlite/claim.js';
import {
  addUnorderedTopicsSql,
  listUnorderedTopicsSql,
  removeUnorderedTopicsSql,
  repairHeadsSql,
  takeRepairSlotSql,
} from '../sql/sqlite/chains.js';
import type { D1Db } from './d1-types.js';

function patterns(globs: readonly string[]): string {
  for (const glob of globs) {
    if (typeof glob !== 'string' || glob.length === 0 || glob.length > 255)
      throw new OutboxValidationError(
        'unorderedTopics',
        'a topic pattern must be 1-255 characters',
      );
  }
  return JSON.stringify(globs.map(globToSqliteGlob));
}

/**
 * Declares topics unordered on D1 for every message written from then on (globs: `mail.*`, `*`
 * matches any characters). Order is a property of each message, decided when `enqueue`'s
 * statements run (a message's own `ordered` wins), so every dispatcher — Cron or Durable Object,
 * old deploy or new — agrees on it. Messages already pending keep what they were written with.
 * Idempotent; returns the globs that were new. The dispatchers' `unorderedTopics` option calls it.
 *
 * @example
 * ```ts
 * await addD1UnorderedTopics(env.DB, ['mail.*', 'analytics.*']);
 * ```
 */
export async function addD1UnorderedTopics(
  db: D1Db,
  globs: readonly string[],
  now: () => number = Date.now,
): Promise<string[]> {
  if (globs.length === 0) return [];
  const { results } = await db
    .prepare(addUnorderedTopicsSql)
    .bind(patterns(globs), now())
    .all<{ pattern: string }>();
  return results.map((r) => sqliteGlobToGlob(r.pattern));
}

/** Removes unordered-topic globs; messages written afterwards on those topics are ordered. */
export async function removeD1UnorderedTopics(
  db: D1Db,
  globs: readonly string[],
): Promise<string[]> {
  if (globs.length === 0) return [];
  const { results } = await db
    .prepare(removeUnorderedTopicsSql)
    .bind(patterns(globs))
    .all<{ pattern: string }>();
  return results.map((r) => sqliteGlobToGlob(r.pattern));
}

/** The unordered-topic globs in force on D1. */
export async function listD1UnorderedTopics(db: D1Db): Promise<string[]> {
  const { results } = await db.prepare(listUnorderedTopicsSql).all<{ pattern: string }>();
  return results.map((r) => sqliteGlobToGlob(r.pattern));
}

/**
 * Marks each aggregate's first pending ordered message ready, and returns how many needed it
 * (src/sql/sqlite/chains.ts `repairHeadsSql`): needed only after a Worker of a version before D1 migration 2
 * settled messages while the migration was already applied. The dispatchers run it at most once
 * per `repairIntervalMs`; call it yourself right after such an upgrade. Costs one index seek per
 * aggregate with pending ordered messages.
 */
export async function repairD1Heads(db: D1Db): Promise<number> {
  const { results } = await db.prepare(repairHeadsSql).all<{ id: number }>();
  return results.length;
}

/**
 * Runs {@link repairD1Heads} when no dispatcher did in the last `intervalMs` (recorded in
 * `outbox_maintenance`, so a Cron run and a Durable Object share the schedule). Returns the
 * number of heads marked, or `undefined` when it was not due.
 */
export async function repairD1HeadsIfDue(
  db: D1Db,
  intervalMs: number,
  now: number,
): Promise<number | undefined> {
  const slot = await db.prepare(takeRepairSlotSql).bind(now, intervalMs).first();
  if (!slot) return undefined;
  return repairD1Heads(db);
}
