import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../helpers/run-cli.js';

const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

describe('outbox CLI basics', () => {
  it('--version prints the package version', async () => {
    const result = await runCli(['--version']);
    expect(result.code).toBe(0);
    expect(result.stdout.trim()).toBe(pkg.version);
  });

  it('--help lists the commands and exit codes', async () => {
    const result = await runCli(['--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/migrate/);
    expect(result.stdout).toMatch(/Exit codes/);
  });

  it('migrate --help documents its flags', async () => {
    const result = await runCli(['migrate', '--help']);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/--database-url/);
    expect(result.stdout).toMatch(/--schema/);
  });

  it('an unknown command or flag is a usage error (exit 2)', async () => {
    expect((await runCli(['frobnicate'])).code).toBe(2);
    const bad = await runCli(['migrate', '--no-such-flag']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--help/);
  });

  it('migrate without a database says how to give one (exit 2)', async () => {
    const result = await runCli(['migrate'], { env: { DATABASE_URL: '' } });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--database-url/);
  });

  it('migrate with an invalid schema name is a usage error, before connecting (exit 2)', async () => {
    const result = await runCli([
      'migrate',
      '--database-url',
      'postgres://postgres@127.0.0.1:1/none',
      '--schema',
      'Bad-Name',
    ]);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/not a valid identifier/);
    expect(result.stderr).not.toMatch(/ECONNREFUSED/);
  });
});
