import { execFile } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(import.meta.url);

/** The Postgres schema of test/integration/store/prisma.test.ts. */
export const POSTGRES_PRISMA_SCHEMA = 'test/fixtures/prisma/schema.prisma';
/** The MySQL/MariaDB schema of test/integration/stores/mysql/from-prisma-mysql.test.ts. */
export const MYSQL_PRISMA_SCHEMA = 'test/fixtures/prisma/mysql.prisma';

/**
 * Generates the Prisma client of a schema under test/fixtures/prisma/ (once per schema and Prisma
 * version: it is kept under .tmp/prisma-client/, gitignored) and imports it. `npm ci` runs no
 * install scripts here, so nothing else generates it, and a fresh clone generates it on its
 * first test run (about a second).
 *
 * Generated inside the repository, not in the OS temp dir: the client imports
 * `@prisma/client/runtime/...`, which only resolves from below this node_modules. Generated
 * into a private directory, then renamed into place, so two test files (or runs) generating at
 * once never see half a client.
 */
export async function importPrismaClient(
  schemaFile: string = POSTGRES_PRISMA_SCHEMA,
): Promise<Record<string, unknown>> {
  const schema = readFileSync(join(root, schemaFile), 'utf8');
  const versions = ['prisma', '@prisma/client']
    .map((name) => (require(`${name}/package.json`) as { version: string }).version)
    .join(',');
  const key = createHash('sha256').update(`${versions}\n${schema}`).digest('hex').slice(0, 16);
  const base = join(root, '.tmp', 'prisma-client');
  const target = join(base, key);
  const entry = join(target, 'client', 'client.ts');
  if (!existsSync(entry)) await generate(schema, target);
  return (await import(pathToFileURL(entry).href)) as Record<string, unknown>;
}

async function generate(schema: string, target: string): Promise<void> {
  const staging = `${target}.${randomBytes(4).toString('hex')}`;
  mkdirSync(staging, { recursive: true });
  const stagedSchema = join(staging, 'schema.prisma');
  writeFileSync(stagedSchema, schema.replace(/output\s*=\s*"[^"]*"/, 'output = "./client"'));
  const cli = join(dirname(require.resolve('prisma/package.json')), 'build', 'index.js');
  try {
    await promisify(execFile)(process.execPath, [cli, 'generate', '--schema', stagedSchema], {
      cwd: root,
      env: {
        ...process.env,
        // The CLI fetches its native schema engine from binaries.prisma.sh before `generate`,
        // although generating a client never runs it (the schema is parsed by bundled WASM);
        // that host is out of reach here. An existing path in this variable skips the fetch.
        PRISMA_SCHEMA_ENGINE_BINARY: stagedSchema,
        CHECKPOINT_DISABLE: '1',
        PRISMA_HIDE_UPDATE_MESSAGE: '1',
      },
    });
    renameSync(staging, target);
  } catch (error) {
    rmSync(staging, { recursive: true, force: true });
    // Lost the race to another generator: its client is as good as ours.
    if (existsSync(join(target, 'client', 'client.ts'))) return;
    throw error;
  }
}
