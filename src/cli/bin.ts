// Entry point for running the CLI from source (tsx src/cli/bin.ts ...), used by tests.
import { runCli } from './main.js';

process.exitCode = await runCli(process.argv.slice(2));
