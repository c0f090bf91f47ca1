import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { cp, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout this script belongs to. */
export const repositoryRoot = fileURLToPath(new URL('..', import.meta.url));

/** What {@link packPackage} produced. */
export interface PackedPackage {
  /** Absolute path of the `.tgz`. */
  tarball: string;
  /** Paths inside the package, as `npm pack` listed them. */
  files: string[];
}

/**
 * Builds and packs the package as `npm publish` would from a clean checkout of the working tree,
 * writing nothing into the checkout: its files (tracked, and untracked ones git does not ignore)
 * are copied to a temporary directory with `node_modules` linked in and packed there with
 * `npm pack`, whose `prepack` script builds `dist/`. Building in place would rewrite `dist/` under
 * whoever else uses it (a concurrent lint or test run; `bin/outbox.js` prefers `dist/` to the
 * sources when it exists) and would pack whatever stale files `dist/` held.
 */
export async function packPackage(destination: string): Promise<PackedPackage> {
  const stage = await mkdtemp(join(tmpdir(), 'agent-outbox-stage-'));
  try {
    const listed = await run(
      'git',
      ['ls-files', '-z', '--cached', '--others', '--exclude-standard'],
      repositoryRoot,
    );
    for (const file of listed.split('\0')) {
      // --cached still lists files deleted from the working tree; a symlinked node_modules is
      // not matched by .gitignore's `node_modules/` (linked in below instead).
      if (file === '' || file === 'node_modules' || !existsSync(join(repositoryRoot, file))) {
        continue;
      }
      await cp(join(repositoryRoot, file), join(stage, file), { verbatimSymlinks: true });
    }
    await symlink(join(repositoryRoot, 'node_modules'), join(stage, 'node_modules'), 'dir');
    // No build step of ours: `npm pack` runs the `prepack` script (the build), as `npm publish`
    // and a git dependency's install do, so this proves the published package gets its dist/.
    const packed = await run('npm', ['pack', '--json', '--pack-destination', destination], stage);
    const [result] = JSON.parse(packed) as { filename: string; files: { path: string }[] }[];
    if (!result) throw new Error(`npm pack reported nothing:\n${packed}`);
    return {
      tarball: join(destination, result.filename),
      files: result.files.map((file) => file.path),
    };
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

/** Runs a command to completion; its stdout, or an error carrying its output. */
export function run(command: string, args: readonly string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        reject(new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${stdout}${stderr}`));
      } else {
        resolve(stdout);
      }
    });
  });
}
