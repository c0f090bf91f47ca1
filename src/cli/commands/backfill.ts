import { readFile } from 'node:fs/promises';
import { parseFlags } from '../parse-flags.js';
import { connectionSettings, DEFAULT_CONNECT_TIMEOUT_MS } from '../dispatch/runners.js';
import { pgPoolTransactions } from '../../agent/transaction-runner.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { assertSchemaCurrent } from '../../migrations/migrate.js';
import { backfill, BACKFILL_HEADER, type BackfillResult } from '../../retrofit/backfill.js';
import { fromPg } from '../../store/from-pg.js';
import { createPgPool } from '../../store/multi-host-pool.js';
import { redactUrl, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { createProgress } from '../format/progress.js';
import { parseEngineFlag } from '../dispatch/lanes.js';
import { EXIT, UsageError } from '../usage-error.js';

/** `outbox backfill --help`. */
export const backfillHelp = `Usage: outbox backfill --sql FILE --topic TOPIC [options]

Retrofit: enqueues one outbox message per row of a SELECT, e.g. for effects that were due
before the outbox existed. The query must yield the columns aggregate_id (text) and payload
(json/jsonb); other columns are ignored. It runs in a READ ONLY transaction, so anything that
writes is refused. Every row is validated and counted before the first message is written; then
messages are written --batch-size per transaction, each tagged with a backfill_id header.

  -- pending-shipments.sql
  SELECT 'order:' || id AS aggregate_id,
         jsonb_build_object('orderId', id, 'address', address) AS payload
    FROM orders WHERE shipped_at IS NULL ORDER BY id

Options:
  --sql FILE            file with the SELECT (required)
  --topic TOPIC         topic of every message (required)
  --dry-run             validate and count, print the first rows, write nothing (do this first)
  --limit N             refuse, writing nothing, if the query yields more than N rows (default 10000)
  --batch-size N        messages per transaction (default 500, at most 10000)
  --shadow              write shadow messages: dispatched without publishing (compare first)
  --engine claims|lanes which engine's tables to write (default: the one the schema
                        records, outbox engine); lanes for an outbox
                        published by outbox dispatch --engine lanes
  --preview N           rows to show (default 5)
  --database-url URL    Postgres connection string (default: $DATABASE_URL)
  --schema NAME         schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --json                print the result as one JSON object (progress stays on stderr)
  -h, --help            show this help

Exit 0 when done, 1 when the query is refused (not a SELECT, wrong columns, an invalid row,
more rows than --limit: nothing written) or the database fails, 2 on bad flags.
`;

/** `outbox backfill`: enqueue messages from a SELECT (retrofit). */
export async function backfillCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      sql: { type: 'string' },
      topic: { type: 'string' },
      'dry-run': { type: 'boolean', default: false },
      limit: { type: 'string' },
      'batch-size': { type: 'string' },
      shadow: { type: 'boolean', default: false },
      engine: { type: 'string' },
      preview: { type: 'string' },
      ...COMMON_OPTIONS,
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(backfillHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const engine = parseEngineFlag(values.engine);
  if (!values.sql) throw new UsageError('--sql FILE is required (a file with one SELECT)');
  if (!values.topic) throw new UsageError('--topic is required, e.g. --topic order.ship');
  const limit = positiveInt('limit', values.limit, 10_000);
  const batchSize = positiveInt('batch-size', values['batch-size'], 500);
  if (batchSize > 10_000) throw new UsageError('--batch-size must be at most 10000');
  const previewRows = positiveInt('preview', values.preview, 5);
  let sql: string;
  try {
    sql = await readFile(values.sql, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read --sql ${values.sql}: ${(error as Error).message}`);
  }
  const url = resolveDatabaseUrl(values['database-url']);

  const pool = createPgPool(url, {
    // Keepalive and a connect timeout, as for `outbox dispatch`: a partition fails the run.
    ...connectionSettings(DEFAULT_CONNECT_TIMEOUT_MS),
    max: 2,
    application_name: 'agent-outbox-backfill',
  });
  pool.on('error', () => undefined);
  const client = await pool.connect();
  try {
    await assertSchemaCurrent(fromPg(pool), values.schema);
    if (!values.json)
      process.stdout.write(
        `${values['dry-run'] ? 'Dry run: ' : ''}backfill of topic "${values.topic}" from ${values.sql} on ${redactUrl(url)}\n`,
      );
    const progress = createProgress();
    const result = await backfill({
      source: fromPg(client),
      transactions: pgPoolTransactions(pool),
      sql,
      topic: values.topic,
      schema: values.schema,
      batchSize,
      limit,
      dryRun: values['dry-run'],
      previewRows,
      shadow: values.shadow,
      engine,
      onProgress: (p) =>
        progress.update(
          p.phase === 'validate'
            ? `  checked ${p.rows} rows`
            : `  written ${p.rows}/${p.total ?? '?'} messages`,
        ),
    });
    if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
    else process.stdout.write(describe(result, values.topic, batchSize));
    return EXIT.ok;
  } finally {
    client.release();
    await pool.end().catch(() => undefined);
  }
}

function describe(result: BackfillResult, topic: string, batchSize: number): string {
  const lines: string[] = [];
  const transactions = Math.ceil(result.rows / batchSize);
  if (result.dryRun) {
    lines.push(
      `The query yields ${result.rows} valid rows: would enqueue ${result.rows} messages on "${topic}" in ${transactions} transaction(s) of at most ${batchSize}. Nothing was written.`,
    );
  } else {
    lines.push(
      `Enqueued ${result.written} messages on "${topic}" in ${result.batches} transaction(s); header ${BACKFILL_HEADER}=${result.backfillId}`,
    );
  }
  if (result.preview.length > 0) {
    lines.push(`First ${result.preview.length}:`);
    for (const row of result.preview) {
      const payload = JSON.stringify(row.payload);
      lines.push(
        `  ${row.aggregateId}  ${payload.length > 120 ? `${payload.slice(0, 117)}...` : payload}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
