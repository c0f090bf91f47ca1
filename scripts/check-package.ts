/**
 * `npm run lint:package` (part of `npm run lint`): checks the tarball users would install, the
 * way their tools see it, not the checkout.
 *
 * - publint (`--strict`: warnings fail too): the exports map, `files`, `bin` and the fields
 *   bundlers and Node read point at files that are in the tarball, in the right module format.
 * - arethetypeswrong with `--profile esm-only`: the package is ESM-only on purpose (`"type":
 *   "module"`, `default` conditions, no CommonJS build; Node 20.19+ can still `require()` it), so the profile leaves out the two
 *   resolutions that can only fail for such a package — `node10` (no `exports` support: our
 *   subpaths are unreachable) and `node16` from CommonJS (`require` of ESM) — and checks `node16`
 *   from ESM and `bundler` for every entry point. `--ignore-rules cjs-resolves-to-esm` alone
 *   would still fail every subpath under `node10`. `--no-definitely-typed`: we ship our own
 *   types, and the check must not ask the registry for `@types/agent-outbox`.
 *
 * Usage: `tsx scripts/check-package.ts`.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { packPackage, repositoryRoot } from './pack-package.js';

const started = performance.now();
const directory = await mkdtemp(join(tmpdir(), 'agent-outbox-check-'));
try {
  const { tarball } = await packPackage(directory);
  const failed: string[] = [];
  // publint's report is short and its suggestions (not failures) are worth seeing: always shown.
  const publint = await tool('publint', ['run', tarball, '--strict']);
  process.stdout.write(publint.output);
  if (publint.code !== 0) failed.push('publint');
  // attw's report is a screen per entry point: shown only when it fails.
  const attwArgs = [tarball, '--profile', 'esm-only', '--no-definitely-typed', '--no-emoji'];
  const attw = await tool('attw', attwArgs);
  if (attw.code !== 0) {
    process.stdout.write(attw.output);
    failed.push('attw');
  } else {
    console.log('attw (esm-only profile): no problems');
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  if (failed.length > 0) {
    console.error(`package check failed (${failed.join(', ')}) in ${seconds} s`);
    process.exitCode = 1;
  } else {
    console.log(`package check passed in ${seconds} s (build, npm pack, publint, attw)`);
  }
} finally {
  await rm(directory, { recursive: true, force: true });
}

/** Runs a dev dependency's CLI; its exit code and its stdout and stderr, interleaved. */
function tool(name: string, args: readonly string[]): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(repositoryRoot, 'node_modules', '.bin', name), args, {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}
