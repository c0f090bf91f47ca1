import { PrismaPg } from '@prisma/adapter-pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { prismaTransactions as agentTransactions } from '../../../src/agent/index.js';
import { prismaTransactions as consumerTransactions } from '../../../src/consumer/index.js';
import { fromPrisma } from '../../../src/index.js';
import { createTestDatabase } from '../../helpers/database.js';
import { importPrismaClient } from '../../helpers/prisma-client.js';
import { describeAgentContract } from './agent-contract.js';
import { describeConsumerContract } from './consumer-contract.js';
import { describeEnqueueContract } from './enqueue-contract.js';
import {
  BUSINESS_TABLES_SQL,
  closeAndDrop,
  ORM_APPLICATION_NAME,
  type OrmContext,
  type OrmHarness,
} from './orm-harness.js';

type IsolationLevel = 'ReadUncommitted' | 'ReadCommitted' | 'RepeatableRead' | 'Serializable';

/**
 * The generated client's surface that these tests use, copied from what Prisma 7.10 generates
 * for test/fixtures/prisma/schema.prisma (internal/class.ts). The generated types live in .tmp/,
 * which tsc does not see on a fresh clone; this record keeps the runners type-checked against
 * Prisma's own signatures — the `$transaction` overloads in their order included.
 */
interface RecordedTransactionClient {
  $executeRawUnsafe(query: string, ...values: any[]): Promise<number>;
  $queryRawUnsafe<T = unknown>(query: string, ...values: any[]): Promise<T>;
  order: { create(args: { data: { userId: string; amount: number } }): Promise<{ id: number }> };
  note: { create(args: { data: { body: string; traceId: string } }): Promise<{ id: number }> };
  charge: {
    create(args: { data: { messageId: string; amount: number } }): Promise<{ id: number }>;
  };
}
interface RecordedPrismaClient extends RecordedTransactionClient {
  $disconnect(): Promise<void>;
  $transaction<P extends Promise<any>[]>(
    arg: [...P],
    options?: { maxWait?: number; timeout?: number; isolationLevel?: IsolationLevel },
  ): Promise<unknown[]>;
  $transaction<R>(
    fn: (prisma: RecordedTransactionClient) => Promise<R>,
    options?: { maxWait?: number; timeout?: number; isolationLevel?: IsolationLevel },
  ): Promise<R>;
}
type PrismaClientClass = new (options: { adapter: PrismaPg }) => RecordedPrismaClient;

let context: OrmContext<RecordedTransactionClient>;
let prisma: RecordedPrismaClient;

/** Prisma as its users write it: model delegates on the `tx` of an interactive transaction. */
function prismaHarness(client: RecordedPrismaClient): OrmHarness<RecordedTransactionClient> {
  return {
    transaction: (fn) => client.$transaction(fn),
    executor: (trx) => fromPrisma(trx),
    outsideExecutor: () => fromPrisma(client),
    insertOrder: async (trx, order) => (await trx.order.create({ data: order })).id,
    insertNote: async (trx, note) => (await trx.note.create({ data: note })).id,
    insertCharge: async (trx, charge) => {
      await trx.charge.create({ data: charge });
    },
    // The runners take the client without casts: their types accept Prisma's own signatures.
    agentTransactions: agentTransactions(client),
    consumerTransactions: consumerTransactions(client, { timeout: 20_000 }),
    // Prisma's pg adapter runs every statement unnamed: nothing is prepared across calls.
    preparesInsert: false,
    close: () => client.$disconnect(),
  };
}

beforeAll(async () => {
  const { PrismaClient } = (await importPrismaClient()) as { PrismaClient: PrismaClientClass };
  const db = await createTestDatabase();
  await db.pool.query(BUSINESS_TABLES_SQL);
  prisma = new PrismaClient({
    adapter: new PrismaPg({
      connectionString: db.url,
      max: 6,
      application_name: ORM_APPLICATION_NAME,
    }),
  });
  context = { db, orm: prismaHarness(prisma) };
});
afterAll(() => closeAndDrop(context));

describeEnqueueContract('Prisma', () => context);
describeAgentContract('Prisma', () => context);
describeConsumerContract('Prisma', () => context);

describe('Prisma specifics', () => {
  it('BigInt and Decimal columns come back as strings, as pg returns them', async () => {
    const { rows } = await fromPrisma(prisma).query(
      `SELECT $1::int8 AS big, 12.50::numeric AS money, 3::int4 AS small, true AS flag,
              '2026-01-02T03:04:05Z'::timestamptz AS at, NULL::int8 AS none`,
      ['9007199254740993'],
    );
    expect(rows).toEqual([
      {
        big: '9007199254740993',
        money: '12.5',
        small: 3,
        flag: true,
        at: new Date('2026-01-02T03:04:05Z'),
        none: null,
      },
    ]);
  });

  it('the runner passes its options to $transaction (a handler past the timeout is rolled back)', async () => {
    const short = agentTransactions(prisma, { timeout: 200 });
    const outcome = await short
      .run(async (tx) => {
        await tx.query("INSERT INTO notes (body, trace_id) VALUES ('too slow', 't')");
        await new Promise((resolve) => setTimeout(resolve, 600));
        await tx.query('SELECT 1');
      })
      .then(
        () => 'committed',
        () => 'rolled back',
      );
    expect(outcome).toBe('rolled back');
    const { rows } = await context.db.pool.query("SELECT 1 FROM notes WHERE body = 'too slow'");
    expect(rows).toEqual([]);
  });
});
