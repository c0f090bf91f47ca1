import { RuleTester } from 'eslint';
import tseslint from 'typescript-eslint';
import { describe, it } from 'vitest';
import plugin from '../../../eslint-plugin/index.js';

RuleTester.describe = describe;
RuleTester.it = it;
RuleTester.itOnly = it.only;

const tester = new RuleTester({
  languageOptions: {
    parser: tseslint.parser,
    ecmaVersion: 2022,
    sourceType: 'module',
    globals: {
      fetch: 'readonly',
      XMLHttpRequest: 'readonly',
      navigator: 'readonly',
      require: 'readonly',
    },
  },
});

const rule = plugin.rules['no-side-effects-in-tools'];
const sideEffect = { messageId: 'sideEffect' } as const;
const sdk = `import { tool } from '@anthropic-ai/claude-agent-sdk';\n`;
const ours = `import { outboxTool } from 'agent-outbox/agent';\n`;

tester.run('no-side-effects-in-tools', rule, {
  valid: [
    // The intended shape: rows and outbox messages only.
    ours +
      `outboxTool({ name: 'x', description: '', input: {}, transactions,
        handler: async (input, { tx, outbox }) => {
          await tx.query('INSERT INTO orders DEFAULT VALUES');
          await outbox.enqueue({ topic: 'payment.charge', aggregateId: 'order:1', payload: {} });
        } });`,
    // fetch outside any tool handler is not this rule's business.
    `export async function sync() { await fetch('https://example.com'); }`,
    // A client built at module level is fine as long as handlers do not call it.
    `import Stripe from 'stripe';\nconst stripe = new Stripe('k');\n` +
      sdk +
      `tool('t', 'd', {}, async () => ({ content: [] }));\nexport const c = () => stripe.charges.create({});`,
    // A local function named fetch is not the global one.
    sdk +
      `const fetch = (id: string) => db.find(id);\ntool('t', 'd', {}, async (a) => { await fetch(a.id); return { content: [] }; });`,
    // Non-denied modules inside a handler.
    `import { randomUUID } from 'node:crypto';\n` +
      sdk +
      `tool('t', 'd', {}, async () => ({ content: [{ type: 'text', text: randomUUID() }] }));`,
    // allowModules exempts a module; allowGlobals a global.
    {
      code:
        `import axios from 'axios';\n` +
        sdk +
        `tool('t', 'd', {}, async () => { axios.isAxiosError(1); return { content: [] }; });`,
      options: [{ allowModules: ['axios'] }],
    },
    {
      code: sdk + `tool('t', 'd', {}, async () => { await fetch('/x'); return { content: [] }; });`,
      options: [{ allowGlobals: ['fetch'] }],
    },
    // Type-only imports cannot be called.
    `import type { Stripe } from 'stripe';\n` +
      sdk +
      `tool('t', 'd', {}, async (a: Stripe) => ({ content: [] }));`,
  ],
  invalid: [
    {
      code:
        sdk +
        `tool('t', 'd', {}, async () => { await fetch('https://api.example.com'); return { content: [] }; });`,
      errors: [{ ...sideEffect, data: { what: 'fetch()' } }],
    },
    {
      code: ours + `outboxTool({ handler: async () => { await globalThis.fetch('/x'); } });`,
      errors: [sideEffect],
    },
    {
      code:
        ours +
        `outboxTool({ handler: async () => { const x = new XMLHttpRequest(); x.send(); } });`,
      errors: [sideEffect],
    },
    {
      code: ours + `outboxTool({ handler: async () => { navigator.sendBeacon('/x', ''); } });`,
      errors: [sideEffect],
    },
    // The framework adapters' builders take the same definition.
    ...['aiSdkTool', 'openAiAgentsTool', 'langChainTool'].map((builder) => ({
      code: `${builder}({ name: 't', handler: async () => { await fetch('/charge'); } });`,
      errors: [sideEffect],
    })),
    // Aliased helper import.
    {
      code: `import { tool as defineTool } from '@anthropic-ai/claude-agent-sdk';\ndefineTool('t', 'd', {}, async () => { await fetch('/x'); return { content: [] }; });`,
      errors: [sideEffect],
    },
    // Member call of the helper: sdk.tool(...).
    {
      code: `import * as sdk from '@anthropic-ai/claude-agent-sdk';\nsdk.tool('t', 'd', {}, async () => { await fetch('/x'); return { content: [] }; });`,
      errors: [sideEffect],
    },
    // Nested function inside the handler.
    {
      code:
        ours +
        `outboxTool({ handler: async (input) => { const notify = () => fetch('/hook'); await Promise.all([1].map(async () => notify())); } });`,
      errors: [sideEffect],
    },
    // Handler declared elsewhere in the file and passed by name.
    {
      code:
        sdk +
        `async function handler() { await fetch('/x'); return { content: [] }; }\ntool('t', 'd', {}, handler);`,
      errors: [sideEffect],
    },
    {
      code:
        sdk +
        `const handler = async () => { await fetch('/x'); return { content: [] }; };\ntool('t', 'd', {}, handler);`,
      errors: [sideEffect],
    },
    // http(s).request / get, aliases and node: prefixes.
    {
      code:
        `import https from 'node:https';\n` +
        sdk +
        `tool('t', 'd', {}, async () => { https.request('https://x'); return { content: [] }; });`,
      errors: [{ ...sideEffect, data: { what: "https.request() (from 'https')" } }],
    },
    {
      code:
        `import { get as httpGet } from 'http';\n` +
        sdk +
        `tool('t', 'd', {}, async () => { httpGet('http://x'); return { content: [] }; });`,
      errors: [sideEffect],
    },
    // child_process, by import and by require, and destructured.
    {
      code:
        `import { execSync } from 'child_process';\n` +
        ours +
        `outboxTool({ handler: async () => { execSync('rm -rf /'); } });`,
      errors: [sideEffect],
    },
    {
      code:
        `const { spawn } = require('node:child_process');\n` +
        ours +
        `outboxTool({ handler: async () => { spawn('ls'); } });`,
      errors: [sideEffect],
    },
    {
      code:
        ours +
        `outboxTool({ handler: async () => { const net = await import('node:net'); net.connect(80); } });`,
      errors: [sideEffect, sideEffect],
    },
    // SDK clients: constructed inside, or built at module level and called inside.
    {
      code:
        `import Stripe from 'stripe';\n` +
        ours +
        `outboxTool({ handler: async () => { const s = new Stripe('k'); await s.charges.create({}); } });`,
      errors: [sideEffect, sideEffect],
    },
    {
      code:
        `import Stripe from 'stripe';\nconst stripe = new Stripe('k');\n` +
        ours +
        `outboxTool({ handler: async () => { await stripe.paymentIntents.create({}); } });`,
      errors: [{ ...sideEffect, data: { what: "stripe.paymentIntents.create() (from 'stripe')" } }],
    },
    {
      code:
        `import nodemailer from 'nodemailer';\nconst mailer = nodemailer.createTransport({});\n` +
        ours +
        `outboxTool({ handler: async () => { await mailer.sendMail({}); } });`,
      errors: [sideEffect],
    },
    {
      code:
        `import { SESClient, SendEmailCommand } from '@aws-sdk/client-ses';\nconst ses = new SESClient({});\n` +
        ours +
        `outboxTool({ handler: async () => { await ses.send(new SendEmailCommand({})); } });`,
      errors: [sideEffect, sideEffect],
    },
    {
      code:
        `import axios from 'axios';\n` +
        sdk +
        `tool('t', 'd', {}, async () => { await axios.post('/x'); return { content: [] }; });`,
      errors: [sideEffect],
    },
    // A client class from a wrapper module the rule cannot see into.
    {
      code:
        `import { Anthropic } from './clients.js';\n` +
        ours +
        `outboxTool({ handler: async () => { new Anthropic(); } });`,
      errors: [{ ...sideEffect, data: { what: 'new Anthropic()' } }],
    },
    // Options: extra tool functions and extra denied modules.
    {
      code: `import { readFileSync } from 'fs';\ndefineAction({ run: async () => { readFileSync('/etc/passwd'); } });`,
      options: [{ toolFunctions: ['defineAction'], denyModules: ['fs'] }],
      errors: [sideEffect],
    },
    // Functions in the options object besides the handler are tool code too.
    {
      code:
        ours +
        `outboxTool({ handler: async () => 1, summarize: () => { fetch('/log'); return ''; } });`,
      errors: [sideEffect],
    },
  ],
});
