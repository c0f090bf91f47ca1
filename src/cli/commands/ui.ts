import { parseFlags } from '../parse-flags.js';
import { connectionSettings, DEFAULT_CONNECT_TIMEOUT_MS } from '../dispatch/runners.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { startDashboard } from '../../dashboard/server.js';
import { assertSchemaCurrent } from '../../migrations/migrate.js';
import { fromPg } from '../../store/from-pg.js';
import { createPgPool } from '../../store/multi-host-pool.js';
import { redactUrl, resolveDatabaseUrl } from '../database.js';
import { portFlag, positiveInt, validateSchemaFlag } from '../flags.js';
import { EXIT, UsageError } from '../usage-error.js';
import { isLoopbackHost } from '../../dashboard/access.js';
import { createLogger, LOG_FORMAT_ENV, resolveLogFormat } from '../log.js';
import { startTracing } from '../telemetry.js';
import { packageVersion } from '../version.js';
import { engineOfCommand, parseEngineFlag } from '../dispatch/lanes.js';

/** `outbox ui --help`. */
export const uiHelp = `Usage: outbox ui [--port 8080] [--host 127.0.0.1] [--token T] [--engine claims|lanes] [options]

Serves a dashboard: backlog and published rate over time, dispatch latency histogram
(last hour), messages held for approval with Approve / Reject (a reason required), dead
letters with their last error and a Replay button, and the latest errors.
One self-contained page (no CDN); open the printed URL.

Options:
  --engine claims|lanes  which engine's messages (default: the one the schema records,
                        outbox engine). With lanes: the published
                        rate and the latency come from the lane cursors (the latency is an
                        upper bound, by up to a sample interval); Replay takes message ids; no
                        approvals panel yet
  --port N              port (default 8080; 0 picks a free one)
  --host ADDR           interface to bind (default 127.0.0.1). Any non-loopback address
                        requires --token: the page can replay dead letters
  --token T             require "Authorization: Bearer T" on every API call (the page asks for
                        it); default $OUTBOX_UI_TOKEN. At least 8 characters
  --sample-interval-ms N  how often backlog and rate are sampled (default 5000)
  --dead-letter-policy P  what a message rejected from the page does to the later messages
                        of its aggregate: hold (default) or skip — as your dispatchers run
  --database-url URL    Postgres connection string (default: $DATABASE_URL)
  --schema NAME         schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --log-format text|json  json: the startup line as one JSON object (default text, or
                        $OUTBOX_LOG_FORMAT)
  -h, --help            show this help

Tracing: the standard OTEL_* variables, as for outbox dispatch (see outbox dispatch --help).

Stops on SIGINT/SIGTERM.
`;

/** `outbox ui`: the web dashboard. */
export async function uiCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      engine: { type: 'string' },
      port: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      token: { type: 'string' },
      'sample-interval-ms': { type: 'string' },
      'dead-letter-policy': { type: 'string', default: 'hold' },
      'database-url': { type: 'string' },
      schema: { type: 'string', default: DEFAULT_SCHEMA },
      'log-format': { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(uiHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const flag = parseEngineFlag(values.engine);
  const logFormat = resolveLogFormat(values['log-format'], false, process.env[LOG_FORMAT_ENV]);
  const port = portFlag('port', values.port, { allowZero: true }) ?? 8080;
  const token = values.token ?? (process.env.OUTBOX_UI_TOKEN || undefined);
  if (token !== undefined && token.length < 8)
    throw new UsageError('--token must be at least 8 characters');
  const policy = values['dead-letter-policy'];
  if (policy !== 'hold' && policy !== 'skip')
    throw new UsageError(`--dead-letter-policy must be hold or skip, got "${policy}"`);
  if (!isLoopbackHost(values.host) && token === undefined)
    throw new UsageError(
      `--host ${values.host} can be reached from other machines: give --token (or set OUTBOX_UI_TOKEN), or bind to 127.0.0.1`,
    );
  const url = resolveDatabaseUrl(values['database-url']);
  const tracing = await startTracing(process.env, packageVersion());
  const pool = createPgPool(url, {
    // Keepalive and a connect timeout, as for `outbox dispatch`.
    ...connectionSettings(DEFAULT_CONNECT_TIMEOUT_MS),
    max: 4,
    application_name: 'agent-outbox-ui',
  });
  pool.on('error', () => undefined);
  try {
    await assertSchemaCurrent(fromPg(pool), values.schema);
    const engine = await engineOfCommand(fromPg(pool), flag, values.schema);
    const dashboard = await startDashboard({
      executor: fromPg(pool),
      schema: values.schema,
      engine,
      port,
      host: values.host,
      token,
      sampleIntervalMs: positiveInt('sample-interval-ms', values['sample-interval-ms'], 5_000),
      deadLetterPolicy: policy,
    });
    const ready =
      `Dashboard for ${redactUrl(url)} (schema "${values.schema}"${engine === 'lanes' ? ', lanes engine' : ''}) at ${dashboard.url}` +
      `${token ? ' (token required)' : ''}`;
    if (logFormat === 'json') {
      const log = createLogger('json');
      log('info', ready, { url: dashboard.url, tokenRequired: token !== undefined });
      if (tracing) log('info', tracing.description);
    } else {
      process.stdout.write(`${ready}\n`);
      if (tracing) process.stdout.write(`${tracing.description}\n`);
    }
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
    await dashboard.close();
    return EXIT.ok;
  } finally {
    await pool.end().catch(() => undefined);
    await tracing?.shutdown();
  }
}
