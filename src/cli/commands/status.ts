import { parseArgs } from 'node:util';
import { readStatus } from '../../admin/status.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag } from '../flags.js';
import { EXIT } from '../usage-error.js';

export const statusHelp = `Usage: outbox status [--database-url URL] [--schema NAME] [--json]

Shows the backlog, the oldest pending message's age, what is due now and in flight, dead
letters, the attempts distribution and the latest errors.

Options:
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --errors N          how many recent errors to show (default 5)
  --json              print one JSON object (keys: backlog, oldestPendingAgeSeconds, dueNow,
                      inFlight, scheduled, deadLetters, attempts, lastErrors)
  -h, --help          show this help

Exit code 0 whatever the state (use the JSON for alerting), 1 if the database is unreachable.
`;

export async function statusCommand(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      'database-url': { type: 'string' },
      schema: { type: 'string', default: DEFAULT_SCHEMA },
      errors: { type: 'string' },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(statusHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const status = await readStatus(db.executor, {
      schema: values.schema,
      lastErrors: positiveInt('errors', values.errors, 5),
    });
    if (values.json) {
      process.stdout.write(`${JSON.stringify(status)}\n`);
      return EXIT.ok;
    }
    const lines = [
      `backlog              ${status.backlog}`,
      `oldest pending age   ${formatAge(status.oldestPendingAgeSeconds)}`,
      `due now              ${status.dueNow}`,
      `in flight            ${status.inFlight}`,
      `scheduled (delay/backoff) ${status.scheduled}`,
      `dead letters         ${status.deadLetters}${status.deadLetters ? '   (outbox dead list; outbox replay --all-dead)' : ''}`,
      `attempts             ${status.attempts.map((a) => `${a.attempts}:${a.messages}`).join('  ') || '-'}`,
    ];
    if (status.lastErrors.length) {
      lines.push('last errors:');
      for (const e of status.lastErrors) {
        lines.push(
          `  #${e.id} ${e.topic} ${e.aggregateId} attempts=${e.attempts}${e.dead ? ' DEAD' : ''}: ${e.lastError}`,
        );
      }
    }
    process.stdout.write(`${lines.join('\n')}\n`);
    return EXIT.ok;
  } finally {
    await db.close();
  }
}

function formatAge(seconds: number): string {
  if (seconds < 1) return '0s';
  if (seconds < 120) return `${seconds.toFixed(1)}s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}
