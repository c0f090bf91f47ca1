import { parseFlags } from '../parse-flags.js';
import { readShadowComparison, readStatus } from '../../admin/status.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { LANE_STATUS_ID_WINDOW } from '../../lanes/lane-engine-status.js';
import { engineOfCommand, parseEngineFlag } from '../dispatch/lanes.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { parseDuration } from '../format/duration.js';
import { renderStatus } from '../format/status-view.js';
import { colors, formatAge, table } from '../format/table.js';
import { fleetGlobs, listFleetTargets } from '../fleet-targets.js';
import { EXIT, UsageError } from '../usage-error.js';

export const statusHelp = `Usage: outbox status [--engine claims|lanes] [--database-url URL] [--schema NAME] [--json] [--shadow [--since 24h]]
       outbox status --database-url URL (--databases GLOB | --schemas GLOB) [--engine claims|lanes] [--json]

Shows the backlog, the oldest pending message's age, what is due now and in flight, dead
letters, the attempts distribution and the latest errors. Numbers turn yellow or red (on a
terminal) where the alert rules in ops/prometheus/alerts.yml would fire.

Options:
  --engine claims|lanes  which engine's messages (default: the one the schema
                      records, outbox engine; with --databases, each one's). With
                      lanes: what is after the lane cursors and parked behind failures, counted within
                      ${LANE_STATUS_ID_WINDOW} ids of each lane's first and estimated past them
                      (--json: "backlogEstimated": true); nothing is in flight or held
                      there
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --errors N          how many recent errors to show (default 5)
  --shadow            also compare shadow and live message counts per topic (retrofit shadow
                      mode); reads the --since window of history, so it costs more
  --since DUR         window of --shadow, e.g. 24h, 7d (default 24h)
  --databases GLOB    one line per matching database of the server (pending, oldest age,
                      dead letters, due now), worst first: oldest pending message, then dead
                      letters, then pending; repeat --database-url for several servers.
                      --json prints {"databases":[{"database","pending",
                      "oldestPendingAgeSeconds","deadLetters","dueNow","error"}]}; exit 1 if
                      any database could not be read (its line says why)
  --schemas GLOB      the same for schemas of the --database-url database
  --json              print one JSON object (keys: backlog, oldestPendingAgeSeconds, dueNow,
                      inFlight, scheduled, deadLetters, attempts, lastErrors,
                      pausedRoutes: [{route, reason, pausedAt, pausedUntil, failedProbes}]; with --shadow
                      also shadow: [{topic, shadow, live, shadowDispatched, liveDispatched}])
  -h, --help          show this help

Colours: on when stdout is a terminal; NO_COLOR=1 turns them off, FORCE_COLOR=1 on.
Exit code 0 whatever the state (use the JSON for alerting), 1 if the database is unreachable.
`;

export async function statusCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
      'database-url': { type: 'string', multiple: true },
      databases: { type: 'string' },
      schemas: { type: 'string' },
      errors: { type: 'string' },
      shadow: { type: 'boolean', default: false },
      since: { type: 'string' },
      engine: { type: 'string' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(statusHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const flag = parseEngineFlag(values.engine);
  // Each database's (or schema's) own record when --engine is not given: a fleet may be moving.
  const read: typeof readStatus = async (executor, options) => {
    const schema = options?.schema ?? values.schema;
    const engine = await engineOfCommand(executor, flag, schema);
    return readStatus(executor, { ...options, engine });
  };
  if (values.since !== undefined && !values.shadow)
    throw new UsageError('--since only applies to --shadow');
  const sinceMs = values.since === undefined ? 86_400_000 : parseDuration('since', values.since);
  const lastErrors = positiveInt('errors', values.errors, 5);
  const urls = values['database-url'] ?? [];
  const fleet = fleetGlobs(values);
  if (fleet) {
    if (values.shadow)
      throw new UsageError('--shadow reads one database: drop --databases/--schemas');
    return fleetStatus({ ...fleet, urls, schema: values.schema, json: values.json, read });
  }
  if (urls.length > 1)
    throw new UsageError(
      '--database-url is given more than once: several servers are shown with --databases GLOB or --schemas GLOB only',
    );
  const db = await connect(resolveDatabaseUrl(urls[0]));
  try {
    const engine = await engineOfCommand(db.executor, flag, values.schema);
    const status = await readStatus(db.executor, { schema: values.schema, lastErrors, engine });
    const shadow = values.shadow
      ? await readShadowComparison(db.executor, {
          schema: values.schema,
          sinceSeconds: sinceMs / 1000,
          engine,
        })
      : undefined;
    if (values.json) {
      process.stdout.write(`${JSON.stringify(shadow ? { ...status, shadow } : status)}\n`);
      return EXIT.ok;
    }
    process.stdout.write(
      renderStatus(status, colors(process.stdout), {
        shadow,
        shadowWindow: values.since ?? '24h',
        width: process.stdout.isTTY ? process.stdout.columns : undefined,
        engine,
      }),
    );
    return EXIT.ok;
  } finally {
    await db.close();
  }
}

/** One database's line of `outbox status --databases`. */
interface FleetStatusLine {
  database: string;
  pending: number | null;
  oldestPendingAgeSeconds: number | null;
  deadLetters: number | null;
  dueNow: number | null;
  error?: string;
}

/** Reads at most this many databases at once (one connection each). */
const STATUS_PARALLELISM = 4;

/**
 * `outbox status --databases GLOB`: the backlog of each matching database, worst first — the one
 * whose oldest message waits longest, then the most dead letters, then the most pending — so the
 * first lines are the ones to look at among hundreds.
 */
async function fleetStatus(args: {
  kind: 'databases' | 'schemas';
  glob: string;
  urls: string[];
  schema: string;
  json: boolean;
  read: typeof readStatus;
}): Promise<number> {
  const targets = await listFleetTargets(args);
  const lines: FleetStatusLine[] = [];
  let next = 0;
  const worker = async () => {
    while (next < targets.length) {
      const target = targets[next++]!;
      try {
        const db = await connect(target.url);
        try {
          const status = await args.read(db.executor, { schema: target.schema, lastErrors: 1 });
          lines.push({
            database: target.name,
            pending: status.backlog,
            oldestPendingAgeSeconds: status.oldestPendingAgeSeconds,
            deadLetters: status.deadLetters,
            dueNow: status.dueNow,
          });
        } finally {
          await db.close();
        }
      } catch (error) {
        lines.push({
          database: target.name,
          pending: null,
          oldestPendingAgeSeconds: null,
          deadLetters: null,
          dueNow: null,
          error: (error as Error).message,
        });
      }
    }
  };
  await Promise.all(Array.from({ length: STATUS_PARALLELISM }, worker));
  lines.sort(
    (a, b) =>
      Number(b.error !== undefined) - Number(a.error !== undefined) ||
      (b.oldestPendingAgeSeconds ?? 0) - (a.oldestPendingAgeSeconds ?? 0) ||
      (b.deadLetters ?? 0) - (a.deadLetters ?? 0) ||
      (b.pending ?? 0) - (a.pending ?? 0) ||
      a.database.localeCompare(b.database),
  );
  const failed = lines.filter((l) => l.error !== undefined).length;
  if (args.json) {
    process.stdout.write(`${JSON.stringify({ databases: lines })}\n`);
    return failed > 0 ? EXIT.failure : EXIT.ok;
  }
  const c = colors(process.stdout);
  const rows = lines.map((l) =>
    l.error !== undefined
      ? [l.database, '-', '-', '-', '-', c.red(`error: ${l.error}`)]
      : [
          l.database,
          String(l.pending),
          formatAge(l.oldestPendingAgeSeconds ?? 0),
          l.deadLetters! > 0 ? c.red(String(l.deadLetters)) : '0',
          String(l.dueNow),
          '',
        ],
  );
  process.stdout.write(
    `${lines.length} ${args.kind} matching "${args.glob}", worst first\n` +
      `${table(rows, {
        header: [
          args.kind === 'databases' ? 'DATABASE' : 'SCHEMA',
          'PENDING',
          'OLDEST',
          'DEAD',
          'DUE',
          '',
        ],
        align: ['left', 'right', 'right', 'right', 'right', 'left'],
      })}\n`,
  );
  return failed > 0 ? EXIT.failure : EXIT.ok;
}
