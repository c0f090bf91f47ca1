/**
 * The orders example (SPEC §4.2): an agent's `create_order` / `refund_order` tools that write the
 * order and its side effects in one transaction, and the consumers that perform those effects
 * once. Wire it to a database with {@link createOrdersExample}; the demo and the tests share it.
 */
import type { PGliteInterface } from '@electric-sql/pglite';
import { Kysely, PostgresDialect, sql } from 'kysely';
import type pg from 'pg';
import type { SdkMcpToolDefinition } from '@anthropic-ai/claude-agent-sdk';
import { createToolServer, effectStatusTool, kyselyTransactions } from '../../src/agent/index.js';
import { fromPg, fromPglite, migrate } from '../../src/index.js';
import { createOrdersConsumers, type OrdersConsumers } from './consumers.js';
import { Mailbox } from './mailbox.js';
import { FakePaymentProvider } from './payment-provider.js';
import { PgliteDialect } from './pglite-dialect.js';
import { ORDERS_SCHEMA, type OrdersDatabase } from './schema.js';
import { createOrderTool, refundOrderTool, type FailureInjector } from './tools.js';

export { createOrdersConsumers, type Delivery, type OrdersConsumers } from './consumers.js';
export { Mailbox, type Mail } from './mailbox.js';
export { FakePaymentProvider, type PaymentRecord } from './payment-provider.js';
export { PgliteDialect } from './pglite-dialect.js';
export { ORDERS_SCHEMA, type OrdersDatabase } from './schema.js';
export {
  createOrderTool,
  refundOrderTool,
  REFUND_APPROVAL_THRESHOLD,
  TOPIC,
  type FailureInjector,
} from './tools.js';

/** Consumer names whose ledger the effect status tool reads (examples/demo/consumers.ts). */
export const ORDERS_CONSUMERS = ['payments', 'mailer'] as const;

/** Name of the example's MCP server: the model sees `mcp__orders__create_order`. */
export const ORDERS_SERVER_NAME = 'orders';

/** Options of {@link createOrdersExample}. */
export interface OrdersExampleOptions {
  /** The database: embedded PGlite, or a `pg` Pool (the example never closes either). */
  database: { pglite: PGliteInterface } | { pool: pg.Pool };
  /** Directory the mail consumer writes one `.eml` file per mail into (created if missing). */
  mailboxDir: string;
  /** Makes a tool throw after it wrote its rows and messages, to show the rollback. */
  injectFailure?: FailureInjector;
}

/** The wired example. */
export interface OrdersExample {
  /** Kysely on the given database. */
  db: Kysely<OrdersDatabase>;
  /** Creates the outbox tables (migrate) and the `orders` table. Idempotent. */
  setup(): Promise<void>;
  /**
   * The tool definitions: `create_order`, `refund_order`, and `effect_status` (what became of
   * the effects they queued: awaiting approval, published, performed by payments or mailer, ...).
   */
  // The SDK's own tool type uses `any` here: the tools differ in input shape.
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  tools: SdkMcpToolDefinition<any>[];
  /** A NEW MCP server with the tools — one per `query()` or MCP client. */
  createServer(): ReturnType<typeof createToolServer>;
  /** Fake payment provider the payment consumer charges and refunds through. */
  provider: FakePaymentProvider;
  /** Mailbox directory the mail consumer writes to. */
  mailbox: Mailbox;
  /** Feed every message the dispatcher publishes to `consumers.deliver(message)`. */
  consumers: OrdersConsumers;
  /** Releases Kysely (the database itself stays open: it is the caller's). */
  close(): Promise<void>;
}

/**
 * Wires the example to a database.
 *
 * @example
 * ```ts
 * const example = createOrdersExample({ database: { pglite: await PGlite.create() }, mailboxDir });
 * await example.setup();
 * const { client } = await connectInMemory(example.createServer());
 * await client.callTool({ name: 'create_order', arguments: { user_id: 'u1', email: 'a@example.com',
 *   amount: 1200, currency: 'JPY', idempotency_key: 'req-1' } });
 * // dispatcher → publisher → example.consumers.deliver(message)
 * ```
 */
export function createOrdersExample(options: OrdersExampleOptions): OrdersExample {
  const database = options.database;
  const db = new Kysely<OrdersDatabase>({
    dialect:
      'pglite' in database
        ? new PgliteDialect(database.pglite)
        : new PostgresDialect({
            // Kysely ends the pool it was given on destroy(); this pool is the caller's.
            pool: { connect: () => database.pool.connect(), end: async () => {} },
          }),
  });
  const transactions = kyselyTransactions(db);
  const tools = [
    createOrderTool({ transactions, injectFailure: options.injectFailure }),
    refundOrderTool({ transactions, injectFailure: options.injectFailure }),
    effectStatusTool({ transactions, consumers: ORDERS_CONSUMERS }),
  ];
  const provider = new FakePaymentProvider();
  const mailbox = new Mailbox(options.mailboxDir);

  return {
    db,
    async setup() {
      if ('pglite' in database) {
        await migrate(fromPglite(database.pglite));
      } else {
        const client = await database.pool.connect();
        try {
          await migrate(fromPg(client));
        } finally {
          client.release();
        }
      }
      for (const statement of ORDERS_SCHEMA) await sql.raw(statement).execute(db);
    },
    tools,
    createServer: () => createToolServer({ name: ORDERS_SERVER_NAME, tools }),
    provider,
    mailbox,
    consumers: createOrdersConsumers({ transactions, provider, mailbox }),
    close: () => db.destroy(),
  };
}
