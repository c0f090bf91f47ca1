import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../../../', import.meta.url));
const RULE = 'agent-outbox/no-side-effects-in-tools';

/** The project's own eslint.config.js, as `npx eslint` uses it. */
const eslint = new ESLint({ cwd: root });

describe('the project lints examples/ with no-side-effects-in-tools', () => {
  it('flags a handler calling fetch when it sits under examples/', async () => {
    const code = readFileSync(new URL('./fixtures/fetch-in-handler.ts', import.meta.url), 'utf8');
    const [result] = await eslint.lintText(code, {
      filePath: `${root}examples/orders/fetch-in-handler.ts`,
    });
    const hits = result!.messages.filter((m) => m.ruleId === RULE);
    expect(hits).toHaveLength(1);
    expect(hits[0]!.message).toMatch(/^fetch\(\) inside a tool handler.*outbox\.enqueue/);
    expect(hits[0]!.line).toBe(
      code.split('\n').findIndex((line) => line.includes('await fetch(')) + 1,
    );
  });

  it('the orders example passes it', async () => {
    const results = await eslint.lintFiles(['examples/orders/']);
    expect(results.length).toBeGreaterThan(5);
    const ruleHits = results.flatMap((r) => r.messages.filter((m) => m.ruleId === RULE));
    expect(ruleHits).toEqual([]);
    // And the rule really ran there: it is enabled for those files.
    const config = await eslint.calculateConfigForFile(`${root}examples/orders/tools.ts`);
    expect(config.rules?.[RULE]?.[0]).toBe(2);
  });
});
