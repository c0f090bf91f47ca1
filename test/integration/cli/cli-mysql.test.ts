import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMysqlOutbox } from '../../../src/stores/mysql/index.js';
import {
  createMysqlTestDatabase,
  requireMysql,
  type MysqlTestDatabase,
} from '../../helpers/mysql-database.js';
import { runCli } from '../../helpers/run-cli.js';
import { storeCliScenario } from '../../helpers/store-cli-scenario.js';

const up = await requireMysql();

describe.runIf(up)('outbox on MariaDB (mysql:// and mariadb:// URLs)', () => {
  let db: MysqlTestDatabase;
  beforeAll(async () => {
    db = await createMysqlTestDatabase({ migrated: false });
  });
  afterAll(async () => {
    await db.drop();
  });

  it('migrates, dispatches, shows status and dead letters, replays, prunes', async () => {
    await storeCliScenario({
      url: db.url,
      otherUrl: db.url.replace('mysql:', 'mariadb:'),
      async enqueue(messages) {
        const connection = await db.connect();
        try {
          await connection.beginTransaction();
          await createMysqlOutbox().enqueue(connection, messages);
          await connection.commit();
        } finally {
          await connection.end();
        }
      },
    });
  }, 120_000);

  it('refuses to dispatch on a database that was never migrated', async () => {
    const empty = await createMysqlTestDatabase({ migrated: false });
    try {
      const run = await runCli([
        'dispatch',
        '--database-url',
        empty.url,
        '--publisher',
        'memory:',
        '--once',
      ]);
      expect(run.code).not.toBe(0);
      expect(run.stderr).toContain('outbox migrate');
    } finally {
      await empty.drop();
    }
  });
});
