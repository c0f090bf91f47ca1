/**
 * Runs `npm start`'s script as a user would (a child process, no server, no API key) and checks
 * what it promises: exit code 0 and every effect performed exactly once.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));

function runDemo(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const env = { ...process.env };
    delete env.ANTHROPIC_API_KEY; // the demo needs none; make sure it uses none
    execFile(
      process.execPath,
      ['--import', 'tsx', 'examples/demo/main.ts'],
      { cwd: root, env, maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('npm start (examples/demo/main.ts)', () => {
  // The bound only keeps a hung demo from hanging the suite; nothing here asserts on time.
  it('exits 0 and reports every effect performed exactly once', { timeout: 180_000 }, async () => {
    const { code, stdout, stderr } = await runDemo();
    expect(code, `stdout:\n${stdout}\nstderr:\n${stderr}`).toBe(0);

    const line = (label: string) => stdout.split('\n').find((l) => l.startsWith(label)) ?? '';
    expect(line('effects')).toMatch(
      /^effects +5 charges, 2 refunds, 7 mails — each exactly once: yes$/,
    );
    expect(line('tool calls')).toMatch(/9: 7 committed, 1 deduped, 1 failed and rolled back/);
    expect(line('orders')).toMatch(/^orders +5 \(2 refunded\)/);
    // One approval (issue 20): a refund above 10,000 held, approved by a scripted operator.
    expect(line('approvals')).toMatch(
      /^approvals +1 held for a person: 1 approved \(by ops-oscar\), 0 rejected, 0 waiting$/,
    );
    expect(stdout).toMatch(/\[agent\] effect_status\(\S+\) → awaiting approval/);
    expect(stdout).toMatch(
      /\[operator\] approved #\d+ payment\.refund order:\d+ — by ops-oscar \(a scripted operator\)/,
    );
    expect(stdout).toMatch(/\[agent\] effect_status\(\S+\) → performed/);
    expect(line('duplicates')).toMatch(
      /1 by the tools' idempotency keys, 1 by the consumer ledger/,
    );
    // Transient broker failures were injected, so some publishes needed retries.
    expect(line('retries')).toMatch(/^retries +[1-9]\d* publish attempts failed transiently/);
    expect(stdout).toContain('no order and no outbox row left behind (G1)');
    expect(stdout).toContain('All invariants hold.');
    expect(stdout).not.toMatch(/^FAIL /m);
  });
});
