import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { globToLike } from './topic-patterns.js';
import {
  addUnorderedTopicsSql,
  listUnorderedTopicsSql,
  removeUnorderedTopicsSql,
} from '../sql/unordered-topics.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/**
 * Declares topics unordered for every message written from now on (globs: `mail.*`). Order is a
 * property of each message, decided when it is written (migration 009): a message written on a
 * matching topic without `ordered` set takes no part in its aggregate's order, whichever
 * dispatcher sends it. Messages already pending keep what they were written with. Idempotent;
 * returns the patterns that were new.
 *
 * @example
 * ```ts
 * await addUnorderedTopics(fromPg(pool), ['mail.*', 'analytics.*']);
 * ```
 */
export async function addUnorderedTopics(
  executor: SqlExecutor,
  globs: readonly string[],
  options: { schema?: string } = {},
): Promise<string[]> {
  if (globs.length === 0) return [];
  const patterns = globs.map(globToLike);
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ pattern: string }>(addUnorderedTopicsSql(schema), [
    patterns,
  ]);
  return rows.map((r) => likeToGlob(r.pattern));
}

/** Removes unordered-topic globs; messages written afterwards on those topics are ordered. */
export async function removeUnorderedTopics(
  executor: SqlExecutor,
  globs: readonly string[],
  options: { schema?: string } = {},
): Promise<string[]> {
  if (globs.length === 0) return [];
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ pattern: string }>(removeUnorderedTopicsSql(schema), [
    globs.map(globToLike),
  ]);
  return rows.map((r) => likeToGlob(r.pattern));
}

/** The unordered-topic globs in force. */
export async function listUnorderedTopics(
  executor: SqlExecutor,
  options: { schema?: string } = {},
): Promise<string[]> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows } = await executor.query<{ pattern: string }>(listUnorderedTopicsSql(schema));
  return rows.map((r) => likeToGlob(r.pattern));
}

/** Inverse of `globToLike` for the patterns it produces. */
function likeToGlob(pattern: string): string {
  return pattern.replace(
    /\\([\\%_])|%/g,
    (match, escaped: string | undefined) => escaped ?? (match === '%' ? '*' : match),
  );
}
