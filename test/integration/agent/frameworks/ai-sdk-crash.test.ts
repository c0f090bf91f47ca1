/**
 * Issue 42, AI SDK 6, a real crash: the approved call runs in a separate application process,
 * which is killed with SIGKILL after the tool committed and before it saved the new messages.
 * Resumed from the saved messages, the SDK runs the call again (same `toolCallId`): answered from
 * the first run; the business row, the outbox message and the used approval exist once.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateText, type ModelMessage } from 'ai';
import { describe, expect, it } from 'vitest';
import {
  aiSdkApprovalResponses,
  aiSdkTool,
  decideCallApproval,
} from '../../../../src/ai-sdk/index.js';
import { chargingModel } from './ai-sdk-charging-model.js';
import { approvalShop } from './call-approval-fixture.js';

const child = fileURLToPath(new URL('./ai-sdk-crash-child.ts', import.meta.url));

describe('AI SDK 6: killed after the approved tool committed, resumed from the saved messages', () => {
  const shop = approvalShop();

  it('the effect exists once', { timeout: 120_000 }, async () => {
    const tools = { charge_order: aiSdkTool(shop.definition, { approval: 'call' }) };
    const prompt: ModelMessage[] = [{ role: 'user', content: 'Charge order 1.' }];
    const paused = await generateText({
      model: chargingModel('crash-1', { order_id: 1, amount: 5000 }).model,
      tools,
      messages: prompt,
    });
    const saved = [...prompt, ...paused.response.messages];
    const asked = await shop.approval('crash-1');
    await decideCallApproval(shop.executor, `call-${asked!.id}`, {
      approve: true,
      by: 'alice',
      delivered: true,
    });
    const resumeFrom = [...saved, (await aiSdkApprovalResponses(shop.executor, saved))!];
    const scratch = await mkdtemp(join(tmpdir(), 'ao-ai-crash-'));
    const file = join(scratch, 'messages.json');
    await writeFile(file, JSON.stringify(resumeFrom));
    try {
      // The application process: runs the approved call, then is killed before saving.
      const app = spawn(
        process.execPath,
        ['--import', 'tsx', child, shop.db.url, file, 'crash-1', '1'],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let stderr = '';
      app.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      await new Promise<void>((resolve, reject) => {
        app.stdout.on('data', (chunk: Buffer) => {
          if (chunk.toString().includes('committed')) resolve();
        });
        app.on('exit', (code) => reject(new Error(`the app exited (${code}) first: ${stderr}`)));
      });
      const killed = new Promise((resolve) => app.on('exit', resolve));
      app.kill('SIGKILL');
      await killed;
      expect(await shop.charges(1)).toBe(1);

      // Restarted: the saved messages are those of before the crash.
      const { model, prompts } = chargingModel('crash-1', { order_id: 1, amount: 5000 });
      await generateText({ model, tools, messages: resumeFrom });
      expect(JSON.stringify(prompts)).toContain('"deduped":true');
      expect(await shop.charges(1)).toBe(1);
      expect(await shop.messages(1)).toEqual([{ approval_state: null }]);
      const used = await shop.db.pool.query(
        `SELECT count(*)::int AS n FROM outbox_tool_calls WHERE idempotency_key = 'crash-1'`,
      );
      expect(used.rows[0].n).toBe(1);
    } finally {
      await rm(scratch, { recursive: true, force: true });
    }
  });
});
