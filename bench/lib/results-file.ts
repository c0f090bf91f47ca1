import { mkdirSync, writeFileSync } from 'node:fs';

/** Writes a run's results as JSON to bench/results/`name`, creating the folder if needed. */
export function writeResults(name: string, results: unknown): void {
  mkdirSync(new URL('../results/', import.meta.url), { recursive: true });
  writeFileSync(
    new URL(`../results/${name}`, import.meta.url),
    `${JSON.stringify(results, null, 2)}\n`,
  );
}
