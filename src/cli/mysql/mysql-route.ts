import { migrateMysql, assertMysqlSchemaCurrent } from '../../stores/mysql/migrate-mysql.js';
import { databaseUrlOf } from '../stores/database-url-of.js';
import {
  listMysqlDeadLetters,
  readMysqlStatus,
  replayMysqlDeadLetters,
} from '../../stores/mysql/mysql-admin.js';
import { createMysqlDispatcher } from '../../stores/mysql/mysql-dispatcher.js';
import { pruneMysqlOutbox } from '../../stores/mysql/mysql-retention.js';
import { isMysqlUrl, redactMysqlUrl } from '../../stores/mysql/mysql-url.js';
import { openMysql } from '../../stores/mysql/open-mysql.js';
import { storeAdminCommands, type AdminStore } from '../stores/store-admin-commands.js';
import {
  STORE_DISPATCH_OPTIONS_HELP,
  storeDispatchCommand,
  type OpenedStore,
} from '../stores/store-dispatch.js';
import { storeCommand } from '../stores/store-route.js';
import { UsageError } from '../usage-error.js';

type Command = (argv: string[]) => Promise<number>;

const MYSQL_HELP = `On MySQL 8 or MariaDB 10.6+ (--database-url mysql://user@host:3306/db, or mariadb://…):
  outbox migrate                 create or upgrade the outbox tables and trigger
  outbox status [--errors N]     backlog, oldest age, dead letters, last errors
  outbox dead list [--topic GLOB] [--limit N]
  outbox replay <id...> | --all-dead [--topic GLOB]
  outbox prune --older-than DUR [--batch-size N]
  outbox dispatch --publisher URL [--once] (outbox dispatch --database-url mysql://… --help)
Every command takes --json. A password in the URL is never printed; prefer DATABASE_URL.
`;

const MYSQL_DISPATCH_HELP = `Usage: outbox dispatch --database-url mysql://user@host:3306/db --publisher URL [options]

The polling dispatcher on MySQL 8 or MariaDB 10.6+ (also mariadb://…). Several may run on one
database: SKIP LOCKED claims and leases keep them apart. No LISTEN/NOTIFY on MySQL: new messages
are found by polling.

Options:
${STORE_DISPATCH_OPTIONS_HELP}  --pool-size N            connections of this process (default 10)
`;

function adminStore(url: string): () => Promise<AdminStore> {
  return async () => {
    const pool = await openMysql(url, { connectionLimit: 2 });
    return {
      where: `MySQL ${redactMysqlUrl(url)}`,
      migrate: (onMigration) => migrateMysql(pool, onMigration),
      status: (lastErrors) => readMysqlStatus(pool, { lastErrors }),
      deadLetters: (options) => listMysqlDeadLetters(pool, options),
      replay: (selection) => replayMysqlDeadLetters(pool, selection),
      prune: (olderThanMs, batchSize) => pruneMysqlOutbox(pool, { olderThanMs, batchSize }),
      close: () => pool.end(),
    };
  };
}

async function openForDispatch(
  url: string,
  values: Record<string, string | undefined>,
): Promise<OpenedStore> {
  const size = values['pool-size'] === undefined ? 10 : Number(values['pool-size']);
  if (!Number.isInteger(size) || size < 1)
    throw new UsageError(`--pool-size must be a positive integer, got "${values['pool-size']}"`);
  const pool = await openMysql(url, { connectionLimit: size });
  return {
    label: `MySQL ${redactMysqlUrl(url).replace(/^[a-z]+:\/\//i, '')}`,
    assertSchemaCurrent: () => assertMysqlSchemaCurrent(pool),
    createDispatcher: (options) => createMysqlDispatcher({ ...options, pool }),
    readStatus: () => readMysqlStatus(pool, { lastErrors: 1 }),
    prune: (olderThanMs) => pruneMysqlOutbox(pool, { olderThanMs }),
    close: () => pool.end(),
  };
}

/**
 * The CLI's route to MySQL: `mysql://` and `mariadb://` URLs run these commands, anything else
 * is not ours (undefined).
 */
export function mysqlCommand(name: string, argv: readonly string[]): Command | undefined {
  const url = databaseUrlOf(argv);
  if (url === undefined || !isMysqlUrl(url)) return undefined;
  const admin = storeAdminCommands(adminStore(url), MYSQL_HELP);
  return storeCommand(
    name,
    {
      migrate: admin.migrate,
      dispatch: (args) =>
        storeDispatchCommand(args, {
          help: MYSQL_DISPATCH_HELP,
          extraFlags: ['pool-size'],
          open: (values) => openForDispatch(url, values),
        }),
      status: admin.status,
      dead: admin.dead,
      replay: admin.replay,
      prune: admin.prune,
    },
    'on MySQL/MariaDB',
  );
}
