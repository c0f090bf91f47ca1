import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { createMysqlTestDatabase, requireMysql } from '../helpers/mysql-database.js';
import { runCli } from '../helpers/run-cli.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';
import { packagePaths, root, typeScriptBlocks } from './code-blocks.js';

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
    const [block] = typeScriptBlocks('README.md').filter((b) => b.name === 'mysql-first-app');
    expect(block).toBeDefined();
    const db = await createMysqlTestDatabase({ migrated: false });
    try {
      const paths = packagePaths();
      const code = block!.code
        .replace(
          /from '(agent-outbox(?:\/[\w/-]+)?)'/g,
          (_, name: string) => `from '${paths[name]![0]}'`,
        )
        // The app lives in a temporary directory: mysql2 from this checkout's node_modules.
        .replace(
          "from 'mysql2/promise'",
          `from ${JSON.stringify(createRequire(join(root, 'package.json')).resolve('mysql2/promise'))}`,
        )
        .replace("'mysql://root@127.0.0.1:3306/test'", JSON.stringify(db.url));
      expect(code).toContain(db.url);
      const file = join(directory, 'app.mts'); // an ES module outside the package: top-level await
      writeFileSync(file, code);
      await new Promise<void>((resolve, reject) =>
        execFile(
          process.execPath,
          ['--import', 'tsx', file],
          { cwd: root, timeout: 60_000 },
          (error, out, err) =>
            error
              ? reject(new Error(`the MySQL app failed: ${error.message}\n${out}${err}`))
              : resolve(),
        ),
      );

      const receiver = await startWebhookReceiver();
      try {
        const dispatched = await runCli([
          'dispatch',
          '--database-url',
          db.url.replace('mysql:', 'mariadb:'),
          '--publisher',
          receiver.url,
          '--once',
        ]);
        expect(dispatched.code, dispatched.stderr).toBe(0);
        expect(receiver.envelopes.map((e) => [e.topic, e.aggregateId, e.payload])).toEqual([
          ['mail.send', 'order:42', { id: '42' }],
        ]);
      } finally {
        await receiver.close();
      }
    } finally {
      await db.drop();
    }
  },
  120_000,
);
