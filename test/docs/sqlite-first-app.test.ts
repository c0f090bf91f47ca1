import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { runCli } from '../helpers/run-cli.js';
import { startWebhookReceiver } from '../helpers/webhook-receiver.js';
import { packagePaths, root, typeScriptBlocks } from './code-blocks.js';

/**
 * The README's SQLite block (```ts sqlite-first-app) runs as written, in a child process, with its
 * `agent-outbox/sqlite` import pointed at this checkout and its `file:./agent.db` at a temporary
 * directory; then `outbox dispatch --once` on that file delivers its message to a real HTTP
 * endpoint, as the README says.
 */

const directory = mkdtempSync(join(tmpdir(), 'agent-outbox-sqlite-first-app-'));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

test("the README's SQLite app runs and the CLI on its file delivers the message", async () => {
  const [block] = typeScriptBlocks('README.md').filter((b) => b.name === 'sqlite-first-app');
  expect(block).toBeDefined();
  const paths = packagePaths();
  const url = `file:${join(directory, 'agent.db')}`;
  const code = block!.code
    .replace(
      /from '(agent-outbox(?:\/[\w/-]+)?)'/g,
      (_, name: string) => `from '${paths[name]![0]}'`,
    )
    .replace("'file:./agent.db'", JSON.stringify(url));
  expect(code).toContain(url);
  const file = join(directory, 'app.mts'); // an ES module outside the package: top-level await
  writeFileSync(file, code);
  await new Promise<void>((resolve, reject) =>
    execFile(
      process.execPath,
      ['--import', 'tsx', file],
      { cwd: root, timeout: 60_000 },
      (error, out, err) =>
        error
          ? reject(new Error(`the SQLite app failed: ${error.message}\n${out}${err}`))
          : resolve(),
    ),
  );

  const receiver = await startWebhookReceiver();
  try {
    const dispatched = await runCli([
      'dispatch',
      '--database-url',
      url,
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
}, 120_000);
