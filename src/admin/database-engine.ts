import { resolveEngine, type Engine } from '../core/engine.js';
import { OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import { readLaneEngineStatus } from '../lanes/lane-engine-status.js';
import { engineRecordedSql, readEngineSql, setEngineSql } from '../sql/engine.js';
import { claimEngineUnpublishedSql } from '../sql/status.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** How many claim-engine messages {@link setDatabaseEngine} counts before it says "more than". */
export const UNPUBLISHED_COUNT_CAP = 10_000;

/**
 * The engine a schema's defaults follow (migration 036): what `createOutbox()` writes, and what
 * `outbox dispatch`, `outbox status` and the other commands and admin calls read, when they are
 * not given an `engine`. `'claims'` for a schema migrated before the record existed. Read-only;
 * safe inside a caller's transaction (a schema without the record does not make it fail).
 *
 * @example
 * ```ts
 * const engine = await readDatabaseEngine(fromPg(pool)); // 'claims' | 'lanes'
 * ```
 */
export async function readDatabaseEngine(
  executor: SqlExecutor,
  options: { schema?: string } = {},
): Promise<Engine> {
  const schema = quoteIdentifier(options.schema ?? DEFAULT_SCHEMA);
  const { rows: present } = await executor.query<{ recorded: boolean }>(engineRecordedSql, [
    `${schema}.outbox_engine`,
  ]);
  if (!present[0]?.recorded) return 'claims';
  const { rows } = await executor.query<{ engine: string }>(readEngineSql(schema));
  // The CHECK constraint allows only the two names; a missing row is a hand-edited table.
  return rows[0]?.engine === 'lanes' ? 'lanes' : 'claims';
}

/**
 * The engine an API call is about: the one it was given (checked), else the schema's record
 * ({@link readDatabaseEngine}).
 */
export async function engineFor(
  executor: SqlExecutor,
  engine: unknown,
  schema: string | undefined,
): Promise<Engine> {
  if (engine !== undefined) return resolveEngine(engine);
  return readDatabaseEngine(executor, schema === undefined ? {} : { schema });
}

/**
 * A schema's record read once and kept, for objects made synchronously (a writer, a handler, the
 * metrics) that learn their executor later. A failed read is not kept: the next call reads again.
 * An `engine` given is checked at once, so a wrong name fails where it was written.
 */
export function engineOnce(
  engine: unknown,
  schema: string | undefined,
): (executor: SqlExecutor) => Promise<Engine> {
  if (engine !== undefined) {
    const given = resolveEngine(engine);
    return () => Promise.resolve(given);
  }
  let known: Engine | undefined;
  return async (executor) => {
    known ??= await readDatabaseEngine(executor, schema === undefined ? {} : { schema });
    return known;
  };
}

/** What {@link setDatabaseEngine} did. */
export interface EngineChange {
  /** The engine recorded now. */
  engine: Engine;
  /** The engine recorded before (the same when nothing changed). */
  previous: Engine;
  /**
   * Claim-engine messages still unpublished (pending, in flight or held for approval), counted up
   * to {@link UNPUBLISHED_COUNT_CAP} + 1. After a change to lanes they need a claim-engine
   * dispatcher until they are published: lanes messages of their aggregates wait behind them.
   */
  claimEngineUnpublished: number;
}

/**
 * Records the engine a schema's defaults follow (migration 036). Writers and dispatchers read
 * the record when they start (a writer at its first enqueue): restart them to follow a change.
 *
 * To `'lanes'`: always allowed; the claim engine's unpublished messages are counted in the
 * answer (keep a claim-engine dispatcher until they are published, docs/lanes.md "Moving from the
 * claim engine"). To `'claims'`: refused while the lanes engine holds messages not published
 * (after a lane cursor, parked behind a failure, dead letters, held for approval): the claim
 * engine's dispatcher does not read the lanes tables, so they would wait for good and their
 * aggregates' later claim-engine messages would overtake them. `force: true` records it anyway.
 *
 * @example
 * ```ts
 * const change = await setDatabaseEngine(fromPg(pool), 'lanes');
 * if (change.claimEngineUnpublished > 0) console.log('keep the claim-engine dispatcher running');
 * ```
 */
export async function setDatabaseEngine(
  executor: SqlExecutor,
  engine: Engine,
  options: { schema?: string; force?: boolean } = {},
): Promise<EngineChange> {
  // Named, not defaulted: a change of the record says which engine (undefined is no choice here).
  if (engine !== 'claims' && engine !== 'lanes')
    throw new OutboxValidationError(
      'engine',
      `must be 'claims' or 'lanes', got ${JSON.stringify(engine) ?? 'undefined'}`,
    );
  const schemaName = options.schema ?? DEFAULT_SCHEMA;
  const schema = quoteIdentifier(schemaName);
  const { rows: present } = await executor.query<{ recorded: boolean }>(engineRecordedSql, [
    `${schema}.outbox_engine`,
  ]);
  if (!present[0]?.recorded)
    throw new OutboxValidationError(
      'schema',
      `"${schemaName}" has no engine record (migration 36): run \`outbox migrate --schema ${schemaName}\` first`,
    );
  if (engine === 'claims' && options.force !== true) {
    const lanes = await readLaneEngineStatus(executor, { schema: schemaName, lastErrors: 1 });
    if (lanes.backlog + lanes.scheduled + lanes.deadLetters + lanes.awaitingApproval > 0)
      throw new OutboxValidationError(
        'engine',
        `the lanes engine still holds unpublished messages (backlog ${lanes.backlog}, dead letters ${lanes.deadLetters}, awaiting approval ${lanes.awaitingApproval}): the claim engine's dispatcher does not read them. Publish, replay or skip them first (outbox status --engine lanes), or pass force`,
      );
  }
  const { rows } = await executor.query<{ previous: Engine }>(setEngineSql(schema), [engine]);
  const previous = rows[0]?.previous ?? 'claims';
  if (engine === 'claims') return { engine, previous, claimEngineUnpublished: 0 };
  const counted = await executor.query<{ n: number }>(claimEngineUnpublishedSql(schema), [
    UNPUBLISHED_COUNT_CAP + 1,
  ]);
  return { engine, previous, claimEngineUnpublished: Number(counted.rows[0]?.n ?? 0) };
}
