import { parseFlags } from '../parse-flags.js';
import { openSqlite } from '../../stores/sqlite/open-sqlite.js';
import { migrateSqlite } from '../../stores/sqlite/migrate-sqlite.js';
import {
  listSqliteDeadLetters,
  readSqliteStatus,
  replaySqliteDeadLetters,
} from '../../stores/sqlite/sqlite-admin.js';
import type { SqliteDatabase } from '../../stores/sqlite/sqlite-database.js';
import { pruneSqliteOutbox } from '../../stores/sqlite/sqlite-retention.js';
import { sqliteFilePath } from '../../stores/sqlite/sqlite-url.js';
import { positiveInt } from '../flags.js';
import { parseDuration } from '../format/duration.js';
import { renderStatus } from '../format/status-view.js';
import { colors } from '../format/table.js';
import { EXIT, UsageError } from '../usage-error.js';

/**
 * `outbox migrate | status | dead list | replay | prune` on a SQLite file: the same output as on
 * Postgres (status, dead letters and replays have the same shapes), minus what SQLite has not
 * (schemas, approvals, shadow messages, archives).
 */
const common = {
  'database-url': { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

const SQLITE_HELP = `On a SQLite file (--database-url file:./agent.db or sqlite:./agent.db):
  outbox migrate                 create or upgrade the outbox tables
  outbox status [--errors N]     backlog, oldest age, dead letters, last errors
  outbox dead list [--topic GLOB] [--limit N]
  outbox replay <id...> | --all-dead [--topic GLOB]
  outbox prune --older-than DUR [--batch-size N]
  outbox dispatch --publisher URL [--once] (outbox dispatch --database-url file:x.db --help)
Every command takes --json.
`;

function help(): number {
  process.stdout.write(SQLITE_HELP);
  return EXIT.ok;
}

/** Opens the file of a `file:` / `sqlite:` URL, runs `fn`, closes it. */
export async function withSqlite<T>(url: string, fn: (db: SqliteDatabase) => T): Promise<T> {
  const db = await openSqlite(url);
  try {
    return fn(db);
  } finally {
    db.close();
  }
}

export async function sqliteMigrateCommand(url: string, argv: string[]): Promise<number> {
  const { values } = parseFlags({ args: argv, options: common, strict: true });
  if (values.help) return help();
  return withSqlite(url, (db) => {
    if (!values.json)
      process.stdout.write(`Migrating the SQLite outbox in ${sqliteFilePath(url)}\n`);
    const result = migrateSqlite(db, (m) => {
      if (!values.json)
        process.stdout.write(`  applying ${String(m.version).padStart(3, '0')} ${m.name}\n`);
    });
    if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
    else if (result.applied.length === 0)
      process.stdout.write(`Already at version ${result.version}; nothing to do.\n`);
    else
      process.stdout.write(
        `Done: applied ${result.applied.length} migration(s), now at version ${result.version}.\n`,
      );
    return EXIT.ok;
  });
}

export async function sqliteStatusCommand(url: string, argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: { ...common, errors: { type: 'string' } },
    strict: true,
  });
  if (values.help) return help();
  const lastErrors = positiveInt('errors', values.errors, 5);
  return withSqlite(url, (db) => {
    const status = readSqliteStatus(db, { lastErrors });
    if (values.json) process.stdout.write(`${JSON.stringify(status)}\n`);
    else
      process.stdout.write(
        renderStatus(status, colors(process.stdout), {
          width: process.stdout.isTTY ? process.stdout.columns : undefined,
        }),
      );
    return EXIT.ok;
  });
}

export async function sqliteDeadCommand(url: string, argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub !== 'list')
    throw new UsageError(
      `unknown subcommand "dead ${sub ?? ''}"; did you mean "outbox dead list"?`,
    );
  const { values } = parseFlags({
    args: rest,
    options: { ...common, topic: { type: 'string' }, limit: { type: 'string' } },
    strict: true,
  });
  if (values.help) return help();
  const limit = positiveInt('limit', values.limit, 100);
  return withSqlite(url, (db) => {
    const dead = listSqliteDeadLetters(db, { topic: values.topic, limit });
    if (values.json) process.stdout.write(`${JSON.stringify(dead)}\n`);
    else if (dead.length === 0) process.stdout.write('no dead letters\n');
    else
      for (const d of dead)
        process.stdout.write(
          `#${d.id} ${d.messageId} ${d.topic} ${d.aggregateId} seq=${d.sequence} attempts=${d.attempts} dead since ${d.deadLetteredAt.toISOString()}\n    ${d.lastError ?? ''}\n`,
        );
    return EXIT.ok;
  });
}

export async function sqliteReplayCommand(url: string, argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    options: {
      ...common,
      topic: { type: 'string' },
      'all-dead': { type: 'boolean', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) return help();
  if (values['all-dead'] && positionals.length)
    throw new UsageError('give ids or --all-dead, not both');
  if (!values['all-dead'] && positionals.length === 0)
    throw new UsageError('give the ids to replay, or --all-dead');
  return withSqlite(url, (db) => {
    const replayed = replaySqliteDeadLetters(
      db,
      values['all-dead']
        ? { allDead: true, topic: values.topic }
        : { ids: positionals, topic: values.topic },
    );
    const found = new Set(replayed.flatMap((r) => [r.id, r.messageId]));
    const missing = positionals.filter((id) => !found.has(id.toLowerCase()));
    if (values.json) process.stdout.write(`${JSON.stringify({ replayed, notDead: missing })}\n`);
    else {
      process.stdout.write(
        `replayed ${replayed.length} message(s)${replayed.length ? `: ${replayed.map((r) => `#${r.id}`).join(' ')}` : ''}\n`,
      );
      if (missing.length)
        process.stderr.write(`not dead letters (left alone): ${missing.join(' ')}\n`);
    }
    return replayed.length > 0 ? EXIT.ok : EXIT.failure;
  });
}

export async function sqlitePruneCommand(url: string, argv: string[]): Promise<number> {
  const { values } = parseFlags({
    args: argv,
    options: {
      ...common,
      'older-than': { type: 'string' },
      'batch-size': { type: 'string' },
    },
    strict: true,
  });
  if (values.help) return help();
  if (values['older-than'] === undefined)
    throw new UsageError('--older-than is required, e.g. --older-than 30d');
  const olderThanMs = parseDuration('older-than', values['older-than']);
  const batchSize = positiveInt('batch-size', values['batch-size'], 1_000);
  return withSqlite(url, (db) => {
    const deleted = pruneSqliteOutbox(db, { olderThanMs, batchSize });
    process.stdout.write(
      values.json
        ? `${JSON.stringify({ deleted })}\n`
        : `deleted ${deleted} dispatched message(s)\n`,
    );
    return EXIT.ok;
  });
}
