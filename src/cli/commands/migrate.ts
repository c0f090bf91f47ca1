import { parseFlags } from '../parse-flags.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { migrate } from '../../migrations/migrate.js';
import { connect, redactUrl, resolveDatabaseUrl } from '../database.js';
import { EXIT, UsageError } from '../usage-error.js';
import { fleetGlobs, listFleetTargets } from '../fleet-targets.js';
import { parseEngineFlag } from '../dispatch/lanes.js';
import type { Engine } from '../../core/engine.js';

export const migrateHelp = `Usage: outbox migrate [--engine claims|lanes] [--database-url URL] [--schema NAME]
       outbox migrate --database-url URL (--databases GLOB | --schemas GLOB) [--engine claims|lanes]

Creates or upgrades the outbox tables. Safe to run again and from several processes at once
(an advisory lock serialises them; each version is applied once).

Options:
  --database-url URL  Postgres connection string (default: $DATABASE_URL); with --databases,
                      any database of the server (repeat it for several servers)
  --schema NAME       schema for the outbox tables, created if missing (default: ${DEFAULT_SCHEMA})
  --engine E          the engine a new schema records (migration 36): what writers without an
                      engine option write and commands without --engine read (default: lanes
                      for a new schema; a schema upgraded from before 36 records claims, the
                      engine it used). A schema that records the other one already is
                      refused (exit 1): \`outbox engine\` changes a record
  --databases GLOB    migrate every database of the server whose name matches, e.g. 'tenant_*'
                      ('*' any run, '?' one character; templates are skipped), one after the
                      other with a line each; goes on past a failed database and exits 1
                      naming every failure
  --schemas GLOB      the same for schemas of the --database-url database
  --json              print the result as JSON (fleet: {"databases":[{"database","ok",
                      "version","applied","error"}],"failed":N})
  -h, --help          show this help
`;

export async function migrateCommand(argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
      'database-url': { type: 'string', multiple: true },
      databases: { type: 'string' },
      schemas: { type: 'string' },
      engine: { type: 'string' },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(migrateHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const engine = parseEngineFlag(values.engine);
  const fleet = fleetGlobs(values);
  const urls = values['database-url'] ?? [];
  if (fleet)
    return migrateFleet({ ...fleet, urls, schema: values.schema, json: values.json, engine });
  if (urls.length > 1)
    throw new UsageError(
      '--database-url is given more than once: several servers are migrated with --databases GLOB or --schemas GLOB only',
    );
  const url = resolveDatabaseUrl(urls[0]);
  const db = await connect(url);
  try {
    if (!values.json)
      process.stdout.write(`Migrating schema "${values.schema}" on ${redactUrl(url)}\n`);
    const result = await migrate(db.executor, {
      schema: values.schema,
      ...(engine && { engine }),
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

/**
 * `outbox migrate --databases GLOB`: every matching database in turn, a line each, on past a
 * failure; exit 1 naming every database that failed.
 */
async function migrateFleet(args: {
  kind: 'databases' | 'schemas';
  glob: string;
  urls: string[];
  schema: string;
  json: boolean;
  engine: Engine | undefined;
}): Promise<number> {
  const targets = await listFleetTargets({ ...args, anySchema: true });
  const out = (line: string) => {
    if (!args.json) process.stdout.write(`${line}\n`);
  };
  out(`Migrating ${targets.length} ${args.kind} matching "${args.glob}"`);
  const results: {
    database: string;
    ok: boolean;
    version?: number;
    applied?: number;
    error?: string;
  }[] = [];
  const width = String(targets.length).length;
  for (const [i, target] of targets.entries()) {
    const prefix = `[${String(i + 1).padStart(width)}/${targets.length}] ${target.name}:`;
    try {
      const db = await connect(target.url);
      try {
        const result = await migrate(db.executor, {
          schema: target.schema,
          ...(args.engine && { engine: args.engine }),
        });
        results.push({
          database: target.name,
          ok: true,
          version: result.version,
          applied: result.applied.length,
        });
        out(
          result.applied.length === 0
            ? `${prefix} already at version ${result.version}`
            : `${prefix} applied ${result.applied.length} migration(s), now at version ${result.version}`,
        );
      } finally {
        await db.close();
      }
    } catch (error) {
      const message = (error as Error).message;
      results.push({ database: target.name, ok: false, error: message });
      out(`${prefix} FAILED: ${message}`);
    }
  }
  const failed = results.filter((r) => !r.ok);
  if (args.json) {
    process.stdout.write(`${JSON.stringify({ databases: results, failed: failed.length })}\n`);
  } else if (failed.length === 0) {
    out(`Done: ${results.length} ${args.kind} at the current version.`);
  } else {
    process.stderr.write(
      `outbox migrate: ${failed.length} of ${results.length} ${args.kind} failed:\n${failed
        .map((f) => `  ${f.database}: ${f.error}`)
        .join('\n')}\n`,
    );
  }
  return failed.length === 0 ? EXIT.ok : EXIT.failure;
}
