import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The checkout. */
export const root = fileURLToPath(new URL('../..', import.meta.url));

/** One fenced TypeScript block of a Markdown file. */
export interface CodeBlock {
  /** Path of the Markdown file, relative to the checkout. */
  file: string;
  /** Line of the block's first code line in that file (1-based). */
  line: number;
  /** The code. */
  code: string;
  /** The name given after the language, as in ```ts first-app, or undefined. */
  name: string | undefined;
}

/** README.md and every Markdown file under docs/. */
export function documentationFiles(): string[] {
  const docs = readdirSync(join(root, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs];
}

/** The ```ts / ```typescript blocks of `file` (relative to the checkout), in order. */
export function typeScriptBlocks(file: string): CodeBlock[] {
  const lines = readFileSync(join(root, file), 'utf8').split('\n');
  const blocks: CodeBlock[] = [];
  let open: { line: number; name: string | undefined; code: string[] } | undefined;
  let fence: string | undefined;
  lines.forEach((text, index) => {
    if (fence === undefined) {
      const start = /^(\s*)(`{3,})(\w*)\s*(\S*)/.exec(text);
      if (!start) return;
      fence = start[2];
      if (start[3] === 'ts' || start[3] === 'typescript')
        open = { line: index + 2, name: start[4] || undefined, code: [] };
      return;
    }
    if (text.trim() === fence) {
      if (open) blocks.push({ file, line: open.line, name: open.name, code: open.code.join('\n') });
      open = undefined;
      fence = undefined;
      return;
    }
    open?.code.push(text);
  });
  return blocks;
}

/**
 * `agent-outbox` and its subpaths as TypeScript `paths` onto this checkout's sources, from the
 * exports map (`./dist/x/index.d.ts` → `./src/x/index.ts`): the blocks import the package by
 * the name a user writes, and are checked against the code as it is, with no build.
 */
export function packagePaths(): Record<string, string[]> {
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    name: string;
    exports: Record<string, string | { types?: string }>;
  };
  const paths: Record<string, string[]> = {};
  for (const [subpath, target] of Object.entries(manifest.exports)) {
    if (typeof target !== 'object' || !target.types) continue;
    const name = subpath === '.' ? manifest.name : `${manifest.name}/${subpath.slice(2)}`;
    const source = target.types.startsWith('./dist/')
      ? target.types.replace(/^\.\/dist\//, './src/').replace(/\.d\.ts$/, '.ts')
      : target.types;
    paths[name] = [join(root, source)];
  }
  return paths;
}
