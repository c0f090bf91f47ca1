import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const SDKS = ['nats', 'amqplib', 'ioredis', 'kafkajs', '@aws-sdk/client-sqs'];

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => (e.isDirectory() ? sourceFiles(join(dir, e.name)) : [join(dir, e.name)])),
  );
  return nested.flat().filter((file) => file.endsWith('.ts'));
}

// Broker SDKs are optional peer dependencies: importing the core, or any publisher module, must
// not load one. Adapters reach their SDK only through `import('…')` when they connect.
describe('broker SDK imports', () => {
  it('are never static (value) imports in src/publishers or src/index.ts', async () => {
    const files = [...(await sourceFiles('src/publishers')), 'src/index.ts'];
    const offenders: string[] = [];
    for (const file of files) {
      const text = await readFile(file, 'utf8');
      for (const sdk of SDKS) {
        const staticImport = new RegExp(
          `^\\s*(import|export)\\s+(?!type\\b)[^;]*?from\\s+['"]${sdk.replace('/', '\\/')}['"]`,
          'm',
        );
        const require = new RegExp(`require\\(['"]${sdk.replace('/', '\\/')}['"]\\)`);
        if (staticImport.test(text) || require.test(text)) offenders.push(`${file} → ${sdk}`);
      }
    }
    expect(offenders).toEqual([]);
  });

  it('src/index.ts does not import the broker adapters', async () => {
    const text = await readFile('src/index.ts', 'utf8');
    expect(text).not.toMatch(/publishers\/(nats|rabbitmq|redis|sqs|kafka)\//);
  });
});
