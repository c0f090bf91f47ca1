import { parseFlags } from '../parse-flags.js';
import {
  readDatabaseEngine,
  setDatabaseEngine,
  UNPUBLISHED_COUNT_CAP,
} from '../../admin/database-engine.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { OutboxValidationError } from '../../core/errors.js';
import { assertSchemaCurrent } from '../../migrations/migrate.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import type { Engine } from '../../core/engine.js';
import { EXIT, UsageError } from '../usage-error.js';

export const engineHelp = `Usage: outbox engine [claims|lanes] [--force] [--json] [--database-url URL] [--schema NAME]

Shows the engine the schema records (migration 36), or records another. Writers without an
engine option (createOutbox()) write that engine's tables, and dispatch, status, dead, replay,
approvals, approve, reject, ui and backfill work on it when not given --engine.
A schema migrated by an earlier version records claims; \`outbox migrate --engine lanes\`
records lanes on a new one.

  outbox engine          print the recorded engine
  outbox engine lanes    record lanes; says how many claim-engine messages are still
                         unpublished: keep a claims dispatcher (outbox dispatch --engine
                         claims) until there are none (docs/lanes.md, "Moving from the claim
                         engine")
  outbox engine claims   record claims; refused (exit 1) while the lanes engine holds
                         unpublished messages (backlog, parked, dead letters, held), which
                         the claim engine's dispatcher does not read, unless --force

Writers and dispatchers read the record when they start (a writer at its first enqueue):
restart them to follow a change.

Options:
  --force             record claims even though the lanes engine holds unpublished messages
  --json              print {"engine","previous","changed","claimEngineUnpublished"} (without
                      a name: {"engine"})
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  -h, --help          show this help
`;

export async function engineCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    options: { ...COMMON_OPTIONS, force: { type: 'boolean', default: false } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    process.stdout.write(engineHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (positionals.length > 1)
    throw new UsageError(`give one engine, claims or lanes; got ${positionals.join(' ')}`);
  const wanted = positionals[0] === undefined ? undefined : parseEngine(positionals[0]);
  if (values.force && wanted !== 'claims')
    throw new UsageError('--force only applies to `outbox engine claims`');
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    await assertSchemaCurrent(db.executor, values.schema);
    if (wanted === undefined) {
      const engine = await readDatabaseEngine(db.executor, { schema: values.schema });
      process.stdout.write(values.json ? `${JSON.stringify({ engine })}\n` : `${engine}\n`);
      return EXIT.ok;
    }
    let change;
    try {
      change = await setDatabaseEngine(db.executor, wanted, {
        schema: values.schema,
        force: values.force,
      });
    } catch (error) {
      if (!(error instanceof OutboxValidationError)) throw error;
      process.stderr.write(`outbox engine: ${error.message}\n`);
      return EXIT.failure;
    }
    const changed = change.previous !== change.engine;
    if (values.json) {
      process.stdout.write(`${JSON.stringify({ ...change, changed })}\n`);
      return EXIT.ok;
    }
    process.stdout.write(
      changed
        ? `schema "${values.schema}" records ${change.engine} (was ${change.previous}): restart writers and dispatchers to follow it\n`
        : `schema "${values.schema}" records ${change.engine} already\n`,
    );
    const n = change.claimEngineUnpublished;
    if (n > 0)
      process.stdout.write(
        `the claim engine still holds ${n > UNPUBLISHED_COUNT_CAP ? `more than ${UNPUBLISHED_COUNT_CAP}` : n} unpublished message(s): keep \`outbox dispatch --engine claims\` running until \`outbox status --engine claims\` shows none\n`,
      );
    return EXIT.ok;
  } finally {
    await db.close();
  }
}

function parseEngine(value: string): Engine {
  if (value !== 'claims' && value !== 'lanes')
    throw new UsageError(`the engine is claims or lanes, got "${value}"`);
  return value;
}
