#!/usr/bin/env node
// Thin launcher: the CLI itself lives in the compiled output (dist/cli).
const { runCli } = await import('../dist/cli/main.js');
process.exitCode = await runCli(process.argv.slice(2));
