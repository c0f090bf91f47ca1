import { addUnorderedTopics } from '../../dispatcher/unordered-topics.js';
import type { BackoffOptions } from '../../core/backoff.js';
import type { DeadLetterPolicy } from '../../dispatcher/options.js';
import type { RoutePauseOptions } from '../../dispatcher/destination-limits.js';
import type { RateLimit } from '../../dispatcher/rate-limits.js';
import { createLaneDispatcher } from '../../lanes/lane-dispatcher.js';
import type { WakeSource } from '../../dispatcher/wake-source.js';
import type { Publisher } from '../../publishers/publisher.js';
import type { SqlExecutor } from '../../store/sql-executor.js';
import { quoteIdentifier } from '../../core/identifier.js';
import { withStatementTimeout } from '../../store/statement-timeout.js';
import { readDatabaseEngine } from '../../admin/database-engine.js';
import { claimEngineUnpublishedSql } from '../../sql/status.js';
import type { Log } from '../log.js';
import { UsageError } from '../usage-error.js';
import { pollRunner, type DispatchRunner } from './runners.js';

/** The engines `outbox dispatch --engine` runs. */
export type Engine = 'claims' | 'lanes';

/** Checks `--engine`; undefined when not given (the schema's record decides, {@link engineOfCommand}). */
export function parseEngineFlag(value: string | undefined): Engine | undefined {
  if (value === undefined) return undefined;
  if (value !== 'claims' && value !== 'lanes')
    throw new UsageError(`--engine must be claims or lanes, got "${value}"`);
  return value;
}

/**
 * The engine a command works on: `--engine` when given, else the one the schema records
 * (migration 036, `outbox engine`).
 */
export async function engineOfCommand(
  executor: SqlExecutor,
  flag: Engine | undefined,
  schema: string,
): Promise<Engine> {
  return flag ?? readDatabaseEngine(executor, { schema });
}

const SWEEP =
  'with the lanes engine, --mode cdc only wakes the lane dispatcher (its safety-net poll is --poll-interval-ms, default 5000): there is no separate sweeper';
const CDC_ONLY = 'it names the replication slot or publication of --mode cdc: add --mode cdc';
const ONE_CALL =
  "the lanes engine commits a batch's cursor moves together with the next read, in one call: there is no separate claim or settle commit";

/**
 * The flags of `outbox dispatch` that the lanes engine does not take, with why. Refused (exit 2)
 * before anything connects, so that a flag is never silently ignored.
 */
const REFUSED_ON_LANES: Record<string, string> = {
  'sweep-interval-ms': SWEEP,
  'async-settle': ONE_CALL,
  'async-claim': ONE_CALL,
  'claim-shape': 'the lanes engine reads each lane after its cursor; it has no claim shape',
};

/**
 * Throws a UsageError for the first flag given (in `tokens`, as parseArgs returns them) that the
 * lanes engine does not take. `--slot` and `--publication` only with `--mode cdc`; `--concurrency`
 * in fleet mode.
 */
export function refuseLaneFlags(
  tokens: readonly { kind: string; name?: string; value?: string | undefined }[],
): void {
  const fleet = tokens.some((t) => t.name === 'databases' || t.name === 'schemas');
  const cdc = tokens.some((t) => t.name === 'mode' && t.value === 'cdc');
  for (const token of tokens) {
    if (fleet && token.name === 'concurrency' && token.value !== '1')
      throw new UsageError(
        '--concurrency is not available with --engine lanes in fleet mode: each tenant is served by one lane dispatcher on one connection',
      );
    if (token.kind !== 'option' || token.name === undefined) continue;
    if (!cdc && (token.name === 'slot' || token.name === 'publication'))
      throw new UsageError(`--${token.name} is not available without --mode cdc: ${CDC_ONLY}`);
    const why = REFUSED_ON_LANES[token.name];
    if (why !== undefined)
      throw new UsageError(`--${token.name} is not available with --engine lanes: ${why}`);
  }
}

/** What `outbox dispatch --engine lanes` gives the lanes dispatcher. */
export interface LaneRunOptions {
  executor: SqlExecutor;
  publisher: Publisher;
  schema: string;
  /** Undefined: the lanes dispatcher's own defaults (500 a batch, a poll every 200 ms). */
  batchSize: number | undefined;
  pollIntervalMs: number | undefined;
  leaseMs: number;
  maxAttempts: number;
  backoff: Partial<BackoffOptions>;
  deadLetterPolicy: DeadLetterPolicy;
  unorderedTopics: readonly string[];
  /** `--rate-limit`: declared at start, one limit for every dispatcher of the database. */
  rateLimits?: readonly RateLimit[];
  /** `--route-pause-after`, `--route-pause-max-ms`. */
  routePause?: RoutePauseOptions;
  /** LISTEN/NOTIFY wake-ups (the lanes writer notifies while a dispatcher waits), when on. */
  wakeSource?: WakeSource;
  /** `--statement-timeout-ms`: every statement of the dispatcher bounded (0: none). */
  statementTimeoutMs: number;
  /** `--concurrency`: lane dispatchers in the process, on disjoint lanes (default 1). */
  concurrency?: number;
}

/**
 * The lanes dispatcher behind the runner interface the command drives. `--unordered` is
 * declared first: the lanes writer reads `outbox_unordered_topics` as the claim engine's does.
 */
export async function laneRunner(options: LaneRunOptions): Promise<DispatchRunner> {
  const { unorderedTopics, backoff, batchSize, pollIntervalMs, statementTimeoutMs, ...rest } =
    options;
  const executor = withStatementTimeout(options.executor, statementTimeoutMs);
  await addUnorderedTopics(executor, unorderedTopics, { schema: options.schema });
  const defined = Object.fromEntries(
    Object.entries(backoff).filter(([, v]) => v !== undefined),
  ) as Partial<BackoffOptions>;
  return pollRunner(
    createLaneDispatcher({
      ...rest,
      executor,
      backoff: defined,
      ...(batchSize !== undefined && { batchSize }),
      ...(pollIntervalMs !== undefined && { pollIntervalMs }),
    }),
  );
}

/** Counted up to this many: enough to say "some" or "many". */
const WAITING_COUNT_CAP = 1000;

/**
 * At the start of `outbox dispatch --engine lanes`: a warning when the claim engine still holds
 * unpublished messages. The lanes messages of their aggregates wait for them (the dispatcher
 * defers a message that would overtake one: lane-dispatcher.ts `#behindClaimEngine`), so a
 * claim-engine dispatcher must keep running until they are out; fine when the two engines serve
 * different topics, which is why this warns and does not refuse (docs/lanes.md, "Moving from
 * the claim engine").
 */
export async function warnClaimEngineWaiting(
  executor: SqlExecutor,
  schema: string,
  log: Log,
): Promise<void> {
  const { rows } = await executor.query<{ n: number }>(
    claimEngineUnpublishedSql(quoteIdentifier(schema)),
    [WAITING_COUNT_CAP + 1],
  );
  const n = Number(rows[0]?.n ?? 0);
  if (n === 0) return;
  log(
    'warn',
    `the claim engine still holds ${n > WAITING_COUNT_CAP ? `more than ${WAITING_COUNT_CAP}` : n} unpublished message(s) (the outbox table): lanes messages of their aggregates wait until they are published (looked at again every 5 s). Keep a claim-engine dispatcher running until outbox status shows none (docs/lanes.md, "Moving from the claim engine")`,
    { claimEngineUnpublished: n > WAITING_COUNT_CAP ? `>${WAITING_COUNT_CAP}` : n },
  );
}

/**
 * `outbox dispatch --engine X` on a schema that records the other engine: writers that follow
 * the record (`createOutbox()` without `engine`) write tables this dispatcher does not read.
 * A warning, not a refusal: running both engines' dispatchers is how a schema moves over.
 */
export function warnOtherEngine(log: Log, schema: string, engine: Engine, recorded: Engine): void {
  log(
    'warn',
    `schema "${schema}" records the ${recorded} engine (outbox engine): writers without an engine option write its tables, which this ${engine} dispatcher does not read. Run a ${recorded} dispatcher too, or \`outbox engine ${engine} --schema ${schema}\``,
    { engine, recordedEngine: recorded },
  );
}
