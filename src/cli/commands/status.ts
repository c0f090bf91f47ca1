import { parseFlags } from '../parse-flags.js';
import { readShadowComparison, readStatus } from '../../admin/status.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { parseDuration } from '../format/duration.js';
import { renderStatus } from '../format/status-view.js';
import { colors } from '../format/table.js';
import { EXIT, UsageError } from '../usage-error.js';

export const statusHelp = `Usage: outbox status [--database-url URL] [--schema NAME] [--json] [--shadow [--since 24h]]

Shows the backlog, the oldest pending message's age, what is due now and in flight, dead
letters, the attempts distribution and the latest errors. Numbers turn yellow or red (on a
terminal) where the alert rules in ops/prometheus/alerts.yml would fire.

Options:
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --errors N          how many recent errors to show (default 5)
  --shadow            also compare shadow and live message counts per topic (retrofit shadow
                      mode); reads the --since window of history, so it costs more
  --since DUR         window of --shadow, e.g. 24h, 7d (default 24h)
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
      errors: { type: 'string' },
      shadow: { type: 'boolean', default: false },
      since: { type: 'string' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(statusHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (values.since !== undefined && !values.shadow)
    throw new UsageError('--since only applies to --shadow');
  const sinceMs = values.since === undefined ? 86_400_000 : parseDuration('since', values.since);
  const lastErrors = positiveInt('errors', values.errors, 5);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const status = await readStatus(db.executor, { schema: values.schema, lastErrors });
    const shadow = values.shadow
      ? await readShadowComparison(db.executor, {
          schema: values.schema,
          sinceSeconds: sinceMs / 1000,
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
      }),
    );
    return EXIT.ok;
  } finally {
    await db.close();
  }
}
