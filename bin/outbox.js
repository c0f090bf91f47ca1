#!/usr/bin/env node
// Launcher. Installed package: runs the compiled CLI in dist/ (built by `prepack`, so every
// tarball has it; tsx is never needed). Development checkout without a build: runs the
// TypeScript sources through tsx (a dev dependency), so `npx outbox` works right after `npm ci`.
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/cli/main.js', import.meta.url);
let runCli;
if (existsSync(compiled)) {
  ({ runCli } = await import(compiled.href));
} else {
  let register;
  try {
    ({ register } = await import('tsx/esm/api'));
  } catch {
    console.error(
      'agent-outbox: dist/cli/main.js is missing and tsx is not installed. This copy of the package ' +
        'was not built: in a checkout run `npm ci` (or `npm run build`); from a registry or a ' +
        'tarball, reinstall it (`npm pack` and `npm publish` build it through `prepack`).',
    );
    process.exit(1);
  }
  register();
  ({ runCli } = await import(new URL('../src/cli/main.ts', import.meta.url).href));
}
process.exitCode = await runCli(process.argv.slice(2));
