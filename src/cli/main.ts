import { readFileSync } from 'node:fs';
import { OutboxError } from '../core/errors.js';
import { approvalsCommand, approveCommand, rejectCommand } from './commands/approvals.js';
import { backfillCommand } from './commands/backfill.js';
import { deadCommand, replayCommand } from './commands/dead.js';
import { dispatchCommand } from './commands/dispatch.js';
import { engineCommand } from './commands/engine.js';
import { limitsCommand } from './commands/limits.js';
import { migrateCommand } from './commands/migrate.js';
import { pruneCommand } from './commands/prune.js';
import { statusCommand } from './commands/status.js';
import { uiCommand } from './commands/ui.js';
import { explainDatabaseError } from './errors.js';
import { mysqlCommand } from './mysql/mysql-route.js';
import { sqliteCommand } from './sqlite/sqlite-route.js';
import { EXIT, UsageError } from './usage-error.js';

const help = `Usage: outbox <command> [options]

The transactional outbox for AI-agent tools: side effects never lost, never doubled.

Commands:
  migrate     create or upgrade the outbox tables
  dispatch    publish committed messages to a broker (--once to drain and exit)
  status      backlog, oldest age, in flight, dead letters, last errors (--json)
  engine      the engine the schema records (claims or lanes), or record another
  limits      rate limits with their current rates, and paused routes (--json)
  dead list   list dead-lettered messages
  replay      make dead letters pending again (<id...> or --all-dead)
  approvals   list messages held for a person's decision (--topic T, --json)
  approve     approve held messages: <id...> --by NAME [--note TEXT]
  reject      reject held messages: <id...> --by NAME --reason TEXT
  prune       delete or archive dispatched rows older than --older-than (batched; --dry-run)
  backfill    enqueue messages from a SELECT (--sql FILE --topic T; --dry-run first)
  ui          web dashboard on 127.0.0.1:8080: charts, dead letters with replay

Global options:
  -h, --help     show help (also: outbox <command> --help)
  -v, --version  print the version

Environment:
  DATABASE_URL   default for --database-url: postgres://…, a SQLite file (file:./agent.db)
                 or MySQL/MariaDB (mysql://user@host:3306/db, mariadb://…); migrate,
                 dispatch, status, dead, replay and prune run on SQLite and MySQL

Exit codes: 0 success, 1 the command failed, 2 the command line was wrong.
`;

type Command = (argv: string[]) => Promise<number>;

const commands: Record<string, Command> = {
  migrate: migrateCommand,
  dispatch: dispatchCommand,
  status: statusCommand,
  engine: engineCommand,
  limits: limitsCommand,
  dead: deadCommand,
  replay: replayCommand,
  approvals: approvalsCommand,
  approve: approveCommand,
  reject: rejectCommand,
  prune: pruneCommand,
  backfill: backfillCommand,
  ui: uiCommand,
};

function version(): string {
  // src/cli and dist/cli are both two levels below package.json.
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}

/** Runs the CLI and returns the process exit code. Never calls process.exit itself. */
export async function runCli(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    process.stdout.write(help);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  if (name === '-v' || name === '--version') {
    process.stdout.write(`${version()}\n`);
    return EXIT.ok;
  }
  const command =
    commands[name] && (sqliteCommand(name, rest) ?? mysqlCommand(name, rest) ?? commands[name]);
  if (!command) {
    process.stderr.write(`outbox: unknown command "${name}"\n\n${help}`);
    return EXIT.usage;
  }
  try {
    return await command(rest);
  } catch (error) {
    return report(name, error);
  }
}

function report(command: string, error: unknown): number {
  const isParseError =
    error instanceof TypeError &&
    'code' in error &&
    String((error as { code: unknown }).code).startsWith('ERR_PARSE_ARGS');
  if (error instanceof UsageError || isParseError) {
    process.stderr.write(
      `outbox ${command}: ${(error as Error).message}\nSee: outbox ${command} --help\n`,
    );
    return EXIT.usage;
  }
  const explained = explainDatabaseError(error);
  if (explained !== undefined) {
    process.stderr.write(`outbox ${command}: ${explained}\n`);
    return EXIT.failure;
  }
  if (error instanceof OutboxError) {
    process.stderr.write(`outbox ${command}: ${error.message}\n`);
    return EXIT.failure;
  }
  const message = error instanceof Error ? error.message : String(error);
  process.stderr.write(`outbox ${command}: ${message}\n`);
  return EXIT.failure;
}
