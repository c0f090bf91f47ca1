/**
 * Runs `npm start -- --sqlite` as a user would (a child process, no server, no API key) and
 * checks what it promises: exit code 0, every effect performed exactly once, the failed call
 * rolled back, duplicates suppressed, and the temporary SQLite file gone afterwards.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));

function runDemo(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env };
    delete env.ANTHROPIC_API_KEY; // the demo needs none; make sure it uses none
    execFile(
      process.execPath,
      ['--import', 'tsx', 'examples/demo/main.ts', ...args],
      { cwd: root, env, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('npm start -- --sqlite (examples/demo/sqlite.ts)', () => {
  // The bound only keeps a hung demo from hanging the suite; nothing here asserts on time.
  it('exits 0 and reports every effect performed exactly once', { timeout: 180_000 }, async () => {
    const { code, stdout, stderr } = await runDemo(['--sqlite']);
    expect(code, `stdout:\n${stdout}\nstderr:\n${stderr}`).toBe(0);

    const line = (label: string) => stdout.split('\n').find((l) => l.startsWith(label)) ?? '';
    const file = /SQLite file ready \((.+\.db)\)/.exec(stdout)?.[1];
    expect(file, 'the demo names its SQLite file').toBeDefined();
    expect(existsSync(file!), 'the temporary file is deleted at the end').toBe(false);
    // Not the Postgres demo: no PGlite, and the summary of the SQLite story.
    expect(stdout).not.toContain('PGlite');
    expect(line('effects')).toMatch(
      /^effects +4 charges, 1 refunds, 5 mails — each exactly once: yes$/,
    );
    expect(line('tool calls')).toMatch(/7: 5 committed, 1 deduped, 1 failed and rolled back/);
    expect(line('orders')).toMatch(/^orders +4 \(1 refunded\)/);
    expect(line('duplicates')).toMatch(
      /1 by the tools' idempotency keys, 1 by the consumer ledger/,
    );
    expect(stdout).toMatch(/\[broker\] redelivered payment\.charge order:\d+ → ack \(duplicate\)/);
    // Transient broker failures were injected, so some publishes needed retries.
    expect(line('retries')).toMatch(/^retries +[1-9]\d* publish attempts failed transiently/);
    expect(stdout).toContain('no order and no outbox row left behind (G1)');
    expect(stdout).toContain('All invariants hold.');
    expect(stdout).not.toMatch(/^FAIL /m);
  });

  it(
    'refuses an unknown option with exit code 2, running nothing',
    { timeout: 60_000 },
    async () => {
      const { code, stdout, stderr } = await runDemo(['--mysql']);
      expect(code).toBe(2);
      expect(stderr).toMatch(/unknown option --mysql; usage: npm start \[-- --sqlite\]/);
      expect(stdout).toBe('');
    },
  );
});
