import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postgresJsTransactions as agentTransactions } from '../../../src/agent/index.js';
import { postgresJsTransactions as consumerTransactions } from '../../../src/consumer/index.js';
import { createOutbox, fromPostgresJs } from '../../../src/index.js';
import { createTestDatabase } from '../../helpers/database.js';
import { describeAgentContract } from './agent-contract.js';
import { describeConsumerContract } from './consumer-contract.js';
import { describeEnqueueContract } from './enqueue-contract.js';
import {
  BUSINESS_TABLES_SQL,
  closeAndDrop,
  count,
  ORM_APPLICATION_NAME,
  type OrmContext,
  type OrmHarness,
} from './orm-harness.js';

type Trx = postgres.TransactionSql;

const options = {
  onnotice: () => undefined,
  connection: { application_name: ORM_APPLICATION_NAME },
};

let context: OrmContext<Trx>;

/** postgres.js as its users write it: tagged templates on the `sql` that `sql.begin` hands out. */
function postgresJsHarness(sql: postgres.Sql): OrmHarness<Trx> {
  return {
    // begin's type unwraps arrays of queries; an async callback's value comes back as it is.
    transaction: async <T>(fn: (trx: Trx) => Promise<T>) => (await sql.begin(fn)) as T,
    executor: (trx) => fromPostgresJs(trx),
    outsideExecutor: () => fromPostgresJs(sql),
    insertOrder: async (trx, order) => {
      const [row] =
        await trx`INSERT INTO orders ${trx({ user_id: order.userId, amount: order.amount })} RETURNING id`;
      return row!.id as number;
    },
    insertNote: async (trx, note) => {
      const [row] =
        await trx`INSERT INTO notes (body, trace_id) VALUES (${note.body}, ${note.traceId}) RETURNING id`;
      return row!.id as number;
    },
    insertCharge: async (trx, charge) => {
      await trx`INSERT INTO charges (message_id, amount) VALUES (${charge.messageId}, ${charge.amount})`;
    },
    // The runners take the user's `sql` without casts: their types accept postgres.js's own.
    agentTransactions: agentTransactions(sql),
    consumerTransactions: consumerTransactions(sql),
    preparesInsert: true,
    close: () => sql.end(),
  };
}

beforeAll(async () => {
  const db = await createTestDatabase();
  await db.pool.query(BUSINESS_TABLES_SQL);
  context = { db, orm: postgresJsHarness(postgres(db.url, { ...options, max: 6 })) };
});
afterAll(() => closeAndDrop(context));

describeEnqueueContract('postgres.js', () => context);
describeAgentContract('postgres.js', () => context);
describeConsumerContract('postgres.js', () => context);

describe('postgres.js specifics', () => {
  it('a connection opened with prepare: false prepares nothing (PgBouncer in transaction mode)', async () => {
    const sql = postgres(context.db.url, { ...options, max: 1, prepare: false });
    try {
      const prepared = await sql.begin(async (tx) => {
        await createOutbox().enqueue(fromPostgresJs(tx), {
          topic: 'order.created',
          aggregateId: 'order:unprepared',
          payload: { ok: true },
        });
        const [row] = await tx`SELECT count(*)::int AS n FROM pg_prepared_statements`;
        return row!.n as number;
      });
      expect(prepared).toBe(0);
      expect(await count(context.db, 'outbox', "aggregate_id = 'order:unprepared'")).toBe(1);
    } finally {
      await sql.end();
    }
  });

  it('several statements in one parameterless string run, as migrations send them', async () => {
    const sql = postgres(context.db.url, { ...options, max: 1 });
    try {
      const { rows } = await fromPostgresJs(sql).query<{ n: number }>(
        'CREATE TEMP TABLE t (n int); INSERT INTO t VALUES (7); SELECT n FROM t',
      );
      expect(rows).toEqual([{ n: 7 }]);
    } finally {
      await sql.end();
    }
  });
});
