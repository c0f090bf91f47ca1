import { parseFlags } from '../parse-flags.js';
import { connectionSettings, DEFAULT_CONNECT_TIMEOUT_MS } from '../dispatch/runners.js';
import { pruneLedger } from '../../consumer/prune-ledger.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { assertSchemaCurrent } from '../../migrations/migrate.js';
import { pruneDedupeKeys } from '../../retention/prune-dedupe-keys.js';
import { previewPrune, pruneOutbox } from '../../retention/prune-outbox.js';
import { fromPg } from '../../store/from-pg.js';
import { createPgPool } from '../../store/multi-host-pool.js';
import { redactUrl, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { formatDuration, parseDuration } from '../format/duration.js';
import { createProgress } from '../format/progress.js';
import { EXIT, UsageError } from '../usage-error.js';

/** `outbox prune --help`. */
export const pruneHelp = `Usage: outbox prune --older-than 30d [options]

Deletes dispatched outbox rows whose dispatched_at is older than --older-than, in batches of
--batch-size rows, each batch its own short transaction, and then the dedupe keys whose window
has ended (they deduplicate nothing any more). Pending (undispatched) and dead-lettered rows are
never touched. Safe to interrupt and to run again; safe next to running dispatchers.

Options:
  --older-than DUR          age of dispatched rows to remove, e.g. 30d, 12h (required)
  --archive                 move the rows to outbox_archive (lane messages: outbox_lane_archive)
                            instead of deleting them
  --batch-size N            rows per batch/transaction (default 1000, at most 100000)
  --max-batches N           stop after N batches; run again to continue (default: until done)
  --ledger-older-than DUR   also prune done consumer-ledger rows older than DUR (e.g. 14d);
                            keep it longer than any broker redelivery window
  --dry-run                 count what would be removed, change nothing
  --database-url URL        Postgres connection string (default: $DATABASE_URL)
  --schema NAME             schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --json                    print the result as one JSON object (progress stays on stderr)
  -h, --help                show this help

Progress goes to stderr on long runs. Exit 0 when done, 1 on a database error, 2 on bad flags.
`;

/** `outbox prune`: retention of dispatched rows (and optionally the consumer ledger). */
export async function pruneCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      'older-than': { type: 'string' },
      archive: { type: 'boolean', default: false },
      'batch-size': { type: 'string' },
      'max-batches': { type: 'string' },
      'ledger-older-than': { type: 'string' },
      'dry-run': { type: 'boolean', default: false },
      ...COMMON_OPTIONS,
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(pruneHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (values['older-than'] === undefined)
    throw new UsageError('--older-than is required, e.g. --older-than 30d');
  const olderThanMs = parseDuration('older-than', values['older-than']);
  const ledgerOlderThanMs =
    values['ledger-older-than'] === undefined
      ? undefined
      : parseDuration('ledger-older-than', values['ledger-older-than']);
  const batchSize = positiveInt('batch-size', values['batch-size'], 1000);
  if (batchSize > 100_000) throw new UsageError(`--batch-size must be at most 100000`);
  const maxBatches =
    values['max-batches'] === undefined
      ? undefined
      : positiveInt('max-batches', values['max-batches'], 1);
  const url = resolveDatabaseUrl(values['database-url']);
  const out = (line: string) => {
    if (!values.json) process.stdout.write(`${line}\n`);
  };

  // A pool: every batch is its own autocommitted statement, never one long transaction.
  const pool = createPgPool(url, {
    // Keepalive and a connect timeout, as for `outbox dispatch`: a partition fails the run.
    ...connectionSettings(DEFAULT_CONNECT_TIMEOUT_MS),
    max: 1,
    application_name: 'agent-outbox-prune',
  });
  pool.on('error', () => undefined);
  const executor = fromPg(pool);
  try {
    await assertSchemaCurrent(executor, values.schema);
    const what = `dispatched rows older than ${formatDuration(olderThanMs)}`;
    if (values['dry-run']) {
      const preview = await previewPrune(executor, {
        olderThanMs,
        ledgerOlderThanMs,
        schema: values.schema,
      });
      if (values.json) {
        process.stdout.write(`${JSON.stringify({ dryRun: true, ...preview })}\n`);
      } else {
        out(`Dry run on ${redactUrl(url)} (schema "${values.schema}"): nothing changed.`);
        out(
          `  would ${values.archive ? 'archive' : 'delete'} ${preview.outboxRows} ${what}` +
            (preview.oldestDispatchedAt
              ? ` (oldest dispatched ${preview.oldestDispatchedAt.toISOString()})`
              : ''),
        );
        if (preview.ledgerRows !== undefined)
          out(
            `  would delete ${preview.ledgerRows} ledger rows older than ${formatDuration(ledgerOlderThanMs!)}`,
          );
        out(`  would delete ${preview.dedupeKeys} expired dedupe keys`);
        out(`  in batches of ${batchSize}`);
      }
      return EXIT.ok;
    }

    out(
      `${values.archive ? 'Archiving' : 'Deleting'} ${what} on ${redactUrl(url)} (schema "${values.schema}")`,
    );
    const progress = createProgress();
    const outbox = await pruneOutbox(executor, {
      olderThanMs,
      archive: values.archive,
      batchSize,
      maxBatches,
      schema: values.schema,
      onBatch: (p) =>
        progress.update(
          `  ${p.removed} rows ${values.archive ? 'archived' : 'deleted'} in ${p.batches} batches`,
        ),
    });
    progress.done(
      `  outbox: ${outbox.removed} rows ${values.archive ? 'archived' : 'deleted'} in ${outbox.batches} batches`,
    );
    let ledger: { deleted: number; batches: number } | undefined;
    if (ledgerOlderThanMs !== undefined) {
      ledger = await pruneLedger(executor, {
        olderThanMs: ledgerOlderThanMs,
        batchSize,
        maxBatches,
        schema: values.schema,
      });
      progress.done(`  ledger: ${ledger.deleted} rows deleted in ${ledger.batches} batches`);
    }
    const dedupeKeys = await pruneDedupeKeys(executor, {
      batchSize,
      maxBatches,
      schema: values.schema,
    });
    progress.done(
      `  dedupe keys: ${dedupeKeys.removed} expired keys deleted in ${dedupeKeys.batches} batches`,
    );
    if (values.json) {
      process.stdout.write(
        `${JSON.stringify({ dryRun: false, outbox, ...(ledger && { ledger }), dedupeKeys })}\n`,
      );
    } else {
      out('Done.');
    }
    return EXIT.ok;
  } finally {
    await pool.end().catch(() => undefined);
  }
}
