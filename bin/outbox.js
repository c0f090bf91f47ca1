#!/usr/bin/env node
// Launcher. Installed package: runs the compiled CLI in dist/. Development checkout without a
// build: runs the TypeScript sources through tsx (a dev dependency), so `npx outbox` works
// right after `npm ci`.
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/cli/main.js', import.meta.url);
let runCli;
if (existsSync(compiled)) {
  ({ runCli } = await import(compiled.href));
} else {
  const { register } = await import('tsx/esm/api');
  register();
  ({ runCli } = await import(new URL('../src/cli/main.ts', import.meta.url).href));
}
process.exitCode = await runCli(process.argv.slice(2));
