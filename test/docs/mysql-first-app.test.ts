import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { createMysqlTestDatabase, requireMysql } from '../helpers/mysql-database.js';
import { expectDispatchDeliversReadmeMessage, runReadmeApp } from '../helpers/readme-app.js';
import { root } from './code-blocks.js';

/**
 * The README's MySQL block (```ts mysql-first-app) runs as written, in a child process, with its
 * `agent-outbox/mysql` import pointed at this checkout and its URL at a database of this test's
 * own on the MariaDB server; then `outbox dispatch --once` on that database delivers its message
 * to a real HTTP endpoint, as the README says.
 */

const directory = mkdtempSync(join(tmpdir(), 'agent-outbox-mysql-first-app-'));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

const up = await requireMysql();

test.runIf(up)(
  "the README's MySQL app runs and the CLI on its database delivers the message",
  async () => {
    const db = await createMysqlTestDatabase({ migrated: false });
    try {
      await runReadmeApp('mysql-first-app', directory, (code) => {
        const rewritten = code
          // The app lives in a temporary directory: mysql2 from this checkout's node_modules.
          .replace(
            "from 'mysql2/promise'",
            `from ${JSON.stringify(createRequire(join(root, 'package.json')).resolve('mysql2/promise'))}`,
          )
          .replace("'mysql://root@127.0.0.1:3306/test'", JSON.stringify(db.url));
        expect(rewritten).toContain(db.url);
        return rewritten;
      });
      await expectDispatchDeliversReadmeMessage(db.url.replace('mysql:', 'mariadb:'));
    } finally {
      await db.drop();
    }
  },
  120_000,
);
