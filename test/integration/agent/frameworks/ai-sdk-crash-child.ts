/**
 * The application process of ai-sdk-crash.test.ts: resumes a paused conversation from the
 * messages file it is given (the saved history plus the outbox's approval answers), prints
 * `committed` once `generateText` has run the tool, and then waits — it never saves the new
 * messages. The test kills it with SIGKILL there: the crash between the tool's commit and the
 * save of the framework's state.
 */
import { readFileSync } from 'node:fs';
import { generateText, type ModelMessage } from 'ai';
import pg from 'pg';
import { aiSdkTool } from '../../../../src/ai-sdk/index.js';
import { chargingModel } from './ai-sdk-charging-model.js';
import { chargeDefinition } from './charge-definition.js';

const [url, file, callId, orderId] = process.argv.slice(2) as [string, string, string, string];
const pool = new pg.Pool({ connectionString: url, max: 2 });
const messages = JSON.parse(readFileSync(file, 'utf8')) as ModelMessage[];
const { model } = chargingModel(callId, { order_id: Number(orderId), amount: 5000 });
await generateText({
  model,
  tools: { charge_order: aiSdkTool(chargeDefinition(pool), { approval: 'call' }) },
  messages,
});
process.stdout.write('committed\n');
// Never saves: the parent kills this process now.
setInterval(() => undefined, 60_000);
