import { readFileSync } from 'node:fs';

/** agent-outbox's version, from package.json (src/cli and dist/cli are both two levels below). */
export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    version: string;
  };
  return pkg.version;
}
