import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, test } from 'vitest';
import { expectDispatchDeliversReadmeMessage, runReadmeApp } from '../helpers/readme-app.js';

/**
 * The README's SQLite block (```ts sqlite-first-app) runs as written, in a child process, with its
 * `agent-outbox/sqlite` import pointed at this checkout and its `file:./agent.db` at a temporary
 * directory; then `outbox dispatch --once` on that file delivers its message to a real HTTP
 * endpoint, as the README says.
 */

const directory = mkdtempSync(join(tmpdir(), 'agent-outbox-sqlite-first-app-'));
afterAll(() => rmSync(directory, { recursive: true, force: true }));

test("the README's SQLite app runs and the CLI on its file delivers the message", async () => {
  const url = `file:${join(directory, 'agent.db')}`;
  await runReadmeApp('sqlite-first-app', directory, (code) => {
    const rewritten = code.replace("'file:./agent.db'", JSON.stringify(url));
    expect(rewritten).toContain(url);
    return rewritten;
  });
  await expectDispatchDeliversReadmeMessage(url);
}, 120_000);
