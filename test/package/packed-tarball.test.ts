import { execFile } from 'node:child_process';
import { existsSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import ts from 'typescript';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { packPackage, repositoryRoot, run } from '../../scripts/pack-package.js';

/**
 * The package as a user gets it: packed (built from a copy of the working tree), installed from
 * the tarball into an empty project, and every entry point of its exports map imported by a
 * TypeScript file compiled under `moduleResolution` NodeNext and Bundler.
 *
 * The compiler runs in-process with `skipLibCheck: false` and reports the diagnostics of the
 * importing file and of every declaration file of ours: an import in our .d.ts that does not
 * resolve in the user's project (a dev-only `@types` package, an optional peer's types, a
 * specifier only one resolution mode accepts) is an error there, where the usual
 * `skipLibCheck: true` would silently turn it into `any`. Third-party declarations are not
 * checked (their own errors are not ours to fix, and checking @types/node and the agent SDK in
 * full would take most of a minute).
 */

/**
 * Entry points whose declarations use a peer's types, and those peers. The other entry points
 * must compile with no peer installed (their peers are typed structurally). These are linked
 * from this checkout's node_modules (the lock file's versions, inside the peer ranges) rather
 * than installed: the agent SDK alone is ~450 MB.
 */
const PEER_TYPES: Record<string, readonly string[]> = {
  './agent': ['@anthropic-ai/claude-agent-sdk', '@modelcontextprotocol/sdk', 'zod'],
  './ai-sdk': ['ai', 'zod'],
  './openai-agents': ['@openai/agents', 'zod'],
  './langchain': ['@langchain/core', 'zod'],
  './metrics': ['prom-client'],
  './eslint-plugin': ['eslint'],
};

/** The user's environment, not a peer: Node's own types. */
const ENVIRONMENT_TYPES = ['@types/node'];

const MODES = {
  NodeNext: { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext },
  Bundler: { module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler },
} as const;
type Mode = keyof typeof MODES;

let project: string;
let installed: string;
let packedFiles: string[];

beforeAll(async () => {
  // Real path: the compiler reports installed packages' files by their real paths.
  project = realpathSync(await mkdtemp(join(tmpdir(), 'agent-outbox-consumer-')));
  installed = join(project, 'node_modules', 'agent-outbox');
  // From the working tree as it is: packPackage copies it without dist/ (git ignores it), so the
  // tarball's dist/ is what `npm pack`'s `prepack` built, as for a fresh clone.
  const { tarball, files } = await packPackage(project);
  packedFiles = files;
  await writeFile(
    join(project, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, type: 'module' }),
  );
  await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], project);
  for (const name of ENVIRONMENT_TYPES) await linkFromCheckout(name);
}, 240_000);

afterAll(async () => {
  if (project) await rm(project, { recursive: true, force: true });
});

test('the project resolves only what it installed, and the import list is the exports map', () => {
  // A node_modules above the temporary project would resolve what the tarball failed to bring.
  for (let dir = dirname(project); dir !== dirname(dir); dir = dirname(dir)) {
    expect(existsSync(join(dir, 'node_modules')), `${dir}/node_modules`).toBe(false);
  }
  const ours = JSON.parse(readFileSync(join(repositoryRoot, 'package.json'), 'utf8')) as Manifest;
  const entries = entryPoints();
  expect(entries.length).toBeGreaterThan(0);
  expect(entries).toEqual(Object.keys(ours.exports).filter((key) => key !== './package.json'));
  for (const [entry, peers] of Object.entries(PEER_TYPES)) {
    expect(entries).toContain(entry);
    for (const peer of peers) expect(ours.peerDependencies).toHaveProperty([peer]);
  }
});

test('the tarball holds the build: dist/ for every entry point and the CLI, no sources', () => {
  expect(packedFiles).toContain('dist/index.js');
  expect(packedFiles).toContain('dist/cli/main.js');
  expect(packedFiles).toContain('bin/outbox.js');
  expect(packedFiles.filter((file) => file.startsWith('src/'))).toEqual([]);
});

test('an ESM project imports the package at run time', async () => {
  const script = join(project, 'import.mjs');
  writeFileSync(
    script,
    "import { createOutbox, fromPg, createDispatcher } from 'agent-outbox';\n" +
      "import { createConsumer } from 'agent-outbox/consumer';\n" +
      'console.log([createOutbox, fromPg, createDispatcher, createConsumer].map((f) => typeof f).join());\n',
  );
  expect((await node([script], project)).stdout.trim()).toBe('function,function,function,function');
});

test('a CommonJS project requires it (Node require(esm): the exports use `default`)', async () => {
  const dir = join(project, 'cjs');
  await mkdir(dir, { recursive: true });
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: 'cjs', type: 'commonjs' }));
  writeFileSync(
    join(dir, 'main.js'),
    "const { createOutbox } = require('agent-outbox');\nconsole.log(typeof createOutbox);\n",
  );
  expect((await node([join(dir, 'main.js')], dir)).stdout.trim()).toBe('function');
});

test('`outbox` runs from the installed package without tsx', async () => {
  expect(existsSync(join(project, 'node_modules', 'tsx'))).toBe(false);
  const { stdout } = await node(
    [join(project, 'node_modules', '.bin', 'outbox'), '--help'],
    project,
  );
  expect(stdout).toMatch(/^Usage: outbox <command>/);
});

test('entry points without peer types compile with no peer installed', () => {
  const entries = entryPoints().filter((entry) => !(entry in PEER_TYPES));
  for (const mode of Object.keys(MODES) as Mode[]) {
    expect(compile(entries, mode), mode).toEqual([]);
  }
}, 60_000);

// The agent framework peers' declarations (ai, @openai/agents, @langchain/core) are large: this
// compile took 77 s on a loaded 2-core machine.
test('every entry point compiles with the peers its types use', async () => {
  for (const name of new Set(Object.values(PEER_TYPES).flat())) await linkFromCheckout(name);
  for (const mode of Object.keys(MODES) as Mode[]) {
    expect(compile(entryPoints(), mode), mode).toEqual([]);
  }
}, 180_000);

test('an entry point with broken declarations fails the check', () => {
  // What a new entry point with a bad .d.ts would look like: picked up from the exports map.
  writeFileSync(
    join(installed, 'dist', 'broken.d.ts'),
    "export declare const value: import('./no-such-module.js').Missing;\n",
  );
  const manifestPath = join(installed, 'package.json');
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8')) as Manifest;
  manifest.exports['./broken'] = { types: './dist/broken.d.ts', import: './dist/index.js' };
  writeFileSync(manifestPath, JSON.stringify(manifest));
  expect(entryPoints()).toContain('./broken');
  const errors = compile(['./broken'], 'NodeNext');
  expect(errors.join('\n')).toMatch(/dist\/broken\.d\.ts.*TS2307/);
}, 60_000);

interface Manifest {
  exports: Record<string, unknown>;
  peerDependencies?: Record<string, string>;
}

/** Subpaths of the installed package's exports map, in its order (`./package.json` is JSON). */
function entryPoints(): string[] {
  const manifest = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8')) as Manifest;
  return Object.keys(manifest.exports).filter((key) => key !== './package.json');
}

/** Compiles a file importing `entries`; the diagnostics of that file and of our declarations. */
function compile(entries: readonly string[], mode: Mode): string[] {
  const file = join(project, `entries-${mode}.ts`);
  const imports = entries.map(
    (entry, i) =>
      `export * as entry${i} from '${entry === '.' ? 'agent-outbox' : `agent-outbox/${entry.slice(2)}`}';`,
  );
  writeFileSync(file, `${imports.join('\n')}\n`);
  const program = ts.createProgram({
    rootNames: [file],
    options: {
      ...MODES[mode],
      target: ts.ScriptTarget.ES2022,
      lib: ['lib.es2023.d.ts'],
      types: ['node'],
      strict: true,
      noEmit: true,
      skipLibCheck: false,
    },
  });
  const checked = program
    .getSourceFiles()
    .filter((source) => source.fileName === file || source.fileName.startsWith(`${installed}/`));
  expect(checked.length).toBeGreaterThan(entries.length);
  const diagnostics = [
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...checked.flatMap((source) => [
      ...program.getSyntacticDiagnostics(source),
      ...program.getSemanticDiagnostics(source),
    ]),
  ];
  return diagnostics.map((diagnostic) =>
    ts.formatDiagnostic(diagnostic, {
      getCanonicalFileName: (name) => name,
      getCurrentDirectory: () => project,
      getNewLine: () => '\n',
    }),
  );
}

/** Runs node with `args` in `cwd`; fails on a non-zero exit. */
function node(args: readonly string[], cwd: string): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, args, { cwd }, (error, stdout, stderr) => {
      if (error) reject(new Error(`node ${args.join(' ')}: ${error.message}\n${stdout}${stderr}`));
      else resolve({ stdout, stderr });
    });
  });
}

/** Makes `name` (a package of this checkout's node_modules) resolvable in the project. */
async function linkFromCheckout(name: string): Promise<void> {
  const target = join(project, 'node_modules', name);
  if (existsSync(target)) return;
  await mkdir(dirname(target), { recursive: true });
  await symlink(join(repositoryRoot, 'node_modules', name), target, 'dir');
}
