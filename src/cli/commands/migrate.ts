import { parseFlags } from '../parse-flags.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { migrate } from '../../migrations/migrate.js';
import { connect, redactUrl, resolveDatabaseUrl } from '../database.js';
import { EXIT } from '../usage-error.js';

export const migrateHelp = `Usage: outbox migrate [--database-url URL] [--schema NAME]

Creates or upgrades the outbox tables. Safe to run again and from several processes at once
(an advisory lock serialises them; each version is applied once).

Options:
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema for the outbox tables, created if missing (default: ${DEFAULT_SCHEMA})
  --json              print the result as JSON
  -h, --help          show this help
`;

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(migrateHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const url = resolveDatabaseUrl(values['database-url']);
  const db = await connect(url);
  try {
    if (!values.json)
      process.stdout.write(`Migrating schema "${values.schema}" on ${redactUrl(url)}\n`);
    const result = await migrate(db.executor, {
      schema: values.schema,
      onMigration: values.json
        ? undefined
        : (m) =>
            process.stdout.write(`  applying ${String(m.version).padStart(3, '0')} ${m.name}\n`),
    });
    if (values.json) {
      process.stdout.write(`${JSON.stringify(result)}\n`);
    } else if (result.applied.length === 0) {
      process.stdout.write(`Already at version ${result.version}; nothing to do.\n`);
    } else {
      process.stdout.write(
        `Done: applied ${result.applied.length} migration(s), now at version ${result.version}.\n`,
      );
    }
    return EXIT.ok;
  } finally {
    await db.close();
  }
}
