import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { packagePaths, root, typeScriptBlocks } from '../docs/code-blocks.js';
import { runCli } from './run-cli.js';
import { startWebhookReceiver } from './webhook-receiver.js';

/**
 * Runs the README's ```ts <name> block as written, as an ES module in `directory` (top-level
 * await), in a child process: its `agent-outbox...` imports pointed at this checkout, then
 * `rewrite` (the block's URL to the test's database, a peer resolved from this checkout). Rejects
 * with the child's output when it fails.
 */
export async function runReadmeApp(
  name: string,
  directory: string,
  rewrite: (code: string) => string,
): Promise<void> {
  const [block] = typeScriptBlocks('README.md').filter((b) => b.name === name);
  expect(block, `README.md has a ts ${name} block`).toBeDefined();
  const paths = packagePaths();
  const code = rewrite(
    block!.code.replace(
      /from '(agent-outbox(?:\/[\w/-]+)?)'/g,
      (_, pkg: string) => `from '${paths[pkg]![0]}'`,
    ),
  );
  const file = join(directory, 'app.mts');
  writeFileSync(file, code);
  await new Promise<void>((resolve, reject) =>
    execFile(
      process.execPath,
      ['--import', 'tsx', file],
      { cwd: root, timeout: 60_000 },
      (error, out, err) =>
        error
          ? reject(new Error(`the ${name} app failed: ${error.message}\n${out}${err}`))
          : resolve(),
    ),
  );
}

/**
 * `outbox dispatch --once` on `url` to a real HTTP endpoint delivers exactly the README apps'
 * message (order 42's mail).
 */
export async function expectDispatchDeliversReadmeMessage(url: string): Promise<void> {
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
}
