import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { afterAll, expect, test } from 'vitest';
import { documentationFiles, packagePaths, root, typeScriptBlocks } from './code-blocks.js';

/**
 * Every TypeScript block of README.md and docs/ type-checks (issue 26), as Kysely checks its
 * examples: each block is written to a file of its own (a module: its declarations do not leak
 * into the next block) and the whole set is compiled in one strict program, with `agent-outbox`
 * mapped onto src/ (code-blocks.ts). A block that needs context it does not show — a `db`, a
 * `publisher` — must say so itself (`declare const db: Kysely<Database>;`), so a reader sees
 * where every name comes from and the docs cannot drift from the API.
 */

const directory = join(root, '.tmp', 'doc-blocks');

afterAll(() => rmSync(directory, { recursive: true, force: true }));

test('README.md and docs/ have TypeScript blocks, the README a named first app', () => {
  const blocks = documentationFiles().flatMap(typeScriptBlocks);
  expect(blocks.length).toBeGreaterThan(20);
  expect(typeScriptBlocks('README.md').filter((b) => b.name === 'first-app')).toHaveLength(1);
});

test('every TypeScript block compiles', () => {
  rmSync(directory, { recursive: true, force: true });
  mkdirSync(directory, { recursive: true });
  const blocks = documentationFiles().flatMap(typeScriptBlocks);
  const sources = new Map<string, (typeof blocks)[number]>();
  blocks.forEach((block, index) => {
    const name = join(directory, `${block.file.replace(/[/.]/g, '_')}_${index}.ts`);
    // `export {}` makes a block without imports a module too (top-level await, own scope).
    writeFileSync(name, `${block.code}\nexport {};\n`);
    sources.set(name, block);
  });
  const program = ts.createProgram({
    rootNames: [...sources.keys()],
    options: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      lib: ['lib.es2023.d.ts'],
      types: ['node'],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      esModuleInterop: true,
      paths: packagePaths(),
    },
  });
  const errors: string[] = [];
  for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
    const block = diagnostic.file && sources.get(diagnostic.file.fileName);
    const text = ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
    if (!block || diagnostic.start === undefined) {
      errors.push(text);
      continue;
    }
    const { line } = diagnostic.file!.getLineAndCharacterOfPosition(diagnostic.start);
    errors.push(`${block.file}:${block.line + line}: ${text}`);
  }
  expect(errors).toEqual([]);
}, 120_000);
