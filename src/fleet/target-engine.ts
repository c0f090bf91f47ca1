import { withStatementTimeout } from '../store/statement-timeout.js';
import { readStatus, type OutboxStatus } from '../admin/status.js';
import { quoteIdentifier } from '../core/identifier.js';
import { createDispatcher, type Dispatcher } from '../dispatcher/dispatcher.js';
import type { DispatcherOptions } from '../dispatcher/options.js';
import { resolveDispatcherOptions } from '../dispatcher/options.js';
import { PgOutboxStore } from '../dispatcher/pg-outbox-store.js';
import { addUnorderedTopics } from '../dispatcher/unordered-topics.js';
import { createLaneDispatcher } from '../lanes/lane-dispatcher.js';
import { readLaneEngineStatus } from '../lanes/lane-engine-status.js';
import { laneNextDueSql, nextDueSql } from '../sql/fleet.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { TurnStore } from './turn-store.js';

/** Which engine's tables a fleet dispatches: the claim engine's `outbox`, or the lanes'. */
export type FleetEngine = 'claims' | 'lanes';

/** The dispatcher options a fleet passes on to every tenant's dispatcher. */
export type TenantDispatcherOptions = Omit<
  DispatcherOptions,
  'executor' | 'store' | 'wakeSource' | 'id' | 'schema'
>;

/**
 * What a tenant's turns drive, per engine: its dispatcher (drained once per turn, stopping when
 * `turnOver` says so), when its next message is due once the turn is over, its status for the
 * gauges, and whether a turn with nothing published moves the tenant's write counter by itself.
 */
export interface TargetEngine {
  /** Which engine it is (a fleet following the records rebuilds it when the record changes). */
  readonly name: FleetEngine;
  readonly dispatcher: Dispatcher;
  /** Once per connection, before the first drain (what the claim dispatcher does itself). */
  prepare(executor: SqlExecutor): Promise<void>;
  /** `{ inMs }`: ms from now until the next message is due, null when none is. */
  readonly nextDueSql: string;
  readStatus(executor: SqlExecutor): Promise<OutboxStatus>;
  /**
   * Every drain writes, even one that finds nothing (the lanes engine takes its lanes and gives
   * them back): the counter is read again after every turn, or the turn's own writes would wake
   * the tenant in a loop.
   */
  readonly writesEveryTurn: boolean;
}

/** Builds the engine of one tenant (its dispatcher lives as long as the tenant is owned). */
export function createTargetEngine(args: {
  engine: FleetEngine;
  options: TenantDispatcherOptions;
  schema: string;
  executor: SqlExecutor;
  id: string;
  turnOver: () => boolean;
}): TargetEngine {
  const { options, schema, executor, id, turnOver } = args;
  const resolved = resolveDispatcherOptions({ ...options, schema });
  const quoted = quoteIdentifier(schema);
  if (args.engine === 'lanes') {
    const timed = withStatementTimeout(executor, resolved.statementTimeoutMs);
    return {
      name: 'lanes',
      dispatcher: createLaneDispatcher({
        executor: timed,
        publisher: options.publisher,
        schema,
        id,
        batchSize: resolved.batchSize,
        leaseMs: resolved.leaseMs,
        pollIntervalMs: resolved.pollIntervalMs,
        maxAttempts: resolved.maxAttempts,
        // The CLI leaves a backoff flag not given undefined: the default then, not undefined.
        backoff: Object.fromEntries(
          Object.entries(options.backoff ?? {}).filter(([, v]) => v !== undefined),
        ),
        deadLetterPolicy: resolved.deadLetterPolicy,
        ...(options.routePause && { routePause: options.routePause }),
        ...(options.rateLimits && { rateLimits: options.rateLimits }),
        stopDrain: turnOver,
      }),
      // The lanes writer reads `outbox_unordered_topics` as the claim engine's does.
      prepare: async (e) => {
        await addUnorderedTopics(e, resolved.unorderedTopics, { schema });
      },
      nextDueSql: laneNextDueSql(quoted),
      readStatus: (e) => readLaneEngineStatus(e, { schema }),
      writesEveryTurn: true,
    };
  }
  const store = new TurnStore(
    new PgOutboxStore(executor, {
      schema: resolved.schema,
      settleCommit: resolved.settleCommit,
      claimCommit: resolved.claimCommit,
      statementTimeoutMs: resolved.statementTimeoutMs,
    }),
    turnOver,
  );
  return {
    name: 'claims',
    dispatcher: createDispatcher({ ...options, engine: 'claims', schema, executor, store, id }),
    prepare: () => Promise.resolve(),
    nextDueSql: nextDueSql(quoted),
    readStatus: (e) => readStatus(e, { schema, engine: 'claims' }),
    writesEveryTurn: false,
  };
}

/** Options the lanes engine's fleet does not take, with why (checked by createFleetDispatcher). */
export function laneFleetRefusal(options: DispatcherOptions): string | undefined {
  if ((options.concurrency ?? 1) !== 1)
    return 'concurrency: the lanes engine serves a tenant with one lane dispatcher on one connection in fleet mode (its own writes are discounted from the activity probe per connection)';
  if (options.asyncSettle || options.asyncClaim)
    return "asyncSettle/asyncClaim: the lanes engine commits a batch's cursor moves with the next read, in one call";
  if (options.claimShape !== undefined && options.claimShape !== 'auto')
    return 'claimShape: the lanes engine reads each lane after its cursor; it has no claim shape';
  return undefined;
}
