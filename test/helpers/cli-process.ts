import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));
const bin = fileURLToPath(new URL('../../src/cli/bin.ts', import.meta.url));

/** A long-running `outbox` CLI process (e.g. `dispatch`) in its own OS process. */
export interface CliProcess {
  child: ChildProcess;
  output(): string;
  /** Resolves with the exit code (or the signal name) when the process ends. */
  exited: Promise<number | string>;
}

export function startCli(args: string[], env: NodeJS.ProcessEnv = {}): CliProcess {
  return startScript(bin, args, env);
}

/** A TypeScript file run with tsx in its own OS process, as {@link startCli} runs the CLI. */
export function startScript(
  script: string,
  args: string[],
  env: NodeJS.ProcessEnv = {},
): CliProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | string>((resolve) =>
    child.on('exit', (code, signal) => resolve(code ?? signal ?? 'unknown')),
  );
  return { child, output: () => output, exited };
}

/**
 * The arguments of `outbox dispatch` to `publisherUrl` on `databaseUrl`, polling every 50 ms (the
 * tests' pace), then `extra`: `startCli(dispatchArgs(db.url, receiver.url, '--rate-limit', ...))`.
 */
export function dispatchArgs(databaseUrl: string, publisherUrl: string, ...extra: string[]) {
  return [
    'dispatch',
    '--database-url',
    databaseUrl,
    '--publisher',
    publisherUrl,
    '--poll-interval-ms',
    '50',
    ...extra,
  ];
}
