/**
 * Default lists of the `no-side-effects-in-tools` rule. Each is extended by the rule's `deny*`
 * options and narrowed by its `allow*` options.
 */

/** Functions whose function arguments (or function-valued option properties) are tool handlers. */
export const TOOL_FUNCTIONS = [
  'tool',
  'outboxTool',
  'aiSdkTool',
  'openAiAgentsTool',
  'langChainTool',
];

/**
 * Modules whose use inside a handler is a side effect: network, processes, and clients of
 * external services — including brokers, since publishing from a tool skips the outbox. An entry
 * `@scope/*` matches every package of the scope; `name` also matches its subpaths (`name/x`).
 * `node:` prefixes are ignored. `fs` is left out (reads are common); add it with `denyModules`.
 */
export const DENY_MODULES = [
  'http',
  'https',
  'http2',
  'net',
  'tls',
  'dgram',
  'dns',
  'child_process',
  'cluster',
  'axios',
  'got',
  'ky',
  'undici',
  'node-fetch',
  'cross-fetch',
  'isomorphic-fetch',
  'superagent',
  'request',
  'needle',
  'ws',
  'socket.io-client',
  'stripe',
  '@stripe/*',
  '@anthropic-ai/sdk',
  'openai',
  'nodemailer',
  'resend',
  'postmark',
  '@sendgrid/*',
  'mailgun.js',
  'twilio',
  '@slack/*',
  '@aws-sdk/*',
  'aws-sdk',
  '@google-cloud/*',
  'googleapis',
  '@azure/*',
  'firebase-admin',
  'amqplib',
  'nats',
  '@nats-io/*',
  'kafkajs',
  'ioredis',
  'redis',
  '@upstash/*',
];

/** Globals that reach the network when called or constructed. Dotted entries are member calls. */
export const DENY_GLOBALS = [
  'fetch',
  'XMLHttpRequest',
  'WebSocket',
  'EventSource',
  'navigator.sendBeacon',
];

/**
 * Client classes flagged on `new` inside a handler wherever they come from (a wrapper module the
 * rule cannot see into, a global).
 */
export const DENY_CONSTRUCTORS = [
  'Stripe',
  'Anthropic',
  'OpenAI',
  'Resend',
  'Twilio',
  'WebClient',
  'SESClient',
  'SESv2Client',
  'SNSClient',
  'SQSClient',
  'S3Client',
  'LambdaClient',
  'EventBridgeClient',
];

/** Objects through which a global is reached (`globalThis.fetch`). */
export const GLOBAL_OBJECTS = ['globalThis', 'window', 'self', 'global'];
