import type { TransactionRunner as AgentTransactionRunner } from '../../../src/agent/index.js';
import type { TransactionRunner as ConsumerTransactionRunner } from '../../../src/consumer/index.js';
import type { SqlExecutor } from '../../../src/index.js';
import type { TestDatabase } from '../../helpers/database.js';

/**
 * One ORM (or driver) as the contract suites drive it: its own transaction API, the executor
 * built from its transaction object, the business rows written through the ORM itself, and the
 * agent and consumer runners. Every ORM passes the same suites (enqueue-, agent-, consumer-
 * contract.ts).
 */
export interface OrmHarness<Trx> {
  /** The ORM's own transaction, written as a user writes it (`sql.begin`, `db.transaction`, ...). */
  transaction<T>(fn: (trx: Trx) => Promise<T>): Promise<T>;
  /** The executor under test, built from the ORM's transaction object (`fromX(trx)`). */
  executor(trx: Trx): SqlExecutor;
  /**
   * The same adapter built from the ORM's top-level object (its `db`, `sql`, client), outside any
   * transaction: what a user passes by mistake, and what `enqueue()` must refuse.
   */
  outsideExecutor(): SqlExecutor;
  /** Inserts an order through the ORM's own API; returns its id. */
  insertOrder(trx: Trx, order: { userId: string; amount: number }): Promise<number>;
  /** Inserts a note through the ORM's own API; returns its id. */
  insertNote(trx: Trx, note: { body: string; traceId: string }): Promise<number>;
  /** Inserts a charge (a consumer's effect) through the ORM's own API. */
  insertCharge(trx: Trx, charge: { messageId: string; amount: number }): Promise<void>;
  agentTransactions: AgentTransactionRunner<Trx>;
  consumerTransactions: ConsumerTransactionRunner<Trx>;
  /** Whether the writer's INSERT should show up in `pg_prepared_statements` on this client. */
  preparesInsert: boolean;
  close(): Promise<void>;
}

/** `application_name` of every connection the ORMs under test open (see {@link closeAndDrop}). */
export const ORM_APPLICATION_NAME = 'agent-outbox-orm-test';

/** What a contract suite needs at test time (built in the test file's beforeAll). */
export interface OrmContext<Trx> {
  db: TestDatabase;
  orm: OrmHarness<Trx>;
}

/** The business tables every harness writes to (its ORM schema maps onto them). */
export const BUSINESS_TABLES_SQL = `
CREATE TABLE orders (id serial PRIMARY KEY, user_id text NOT NULL, amount int NOT NULL);
CREATE TABLE notes (id serial PRIMARY KEY, body text NOT NULL, trace_id text NOT NULL);
CREATE TABLE charges (id serial PRIMARY KEY, message_id text NOT NULL, amount int NOT NULL);`;

/**
 * Closes the ORM, waits for its connections to be gone, then drops the database. `pg`'s
 * `Pool.end()` (under Drizzle and Prisma's adapter) resolves before its sockets close; a
 * `DROP DATABASE ... WITH (FORCE)` that catches one still closing makes it emit an error that no
 * one listens to any more, failing the run.
 */
export async function closeAndDrop(context: OrmContext<unknown> | undefined): Promise<void> {
  if (!context) return;
  await context.orm.close();
  for (let i = 0; i < 100; i++) {
    const open = await count(
      context.db,
      'pg_stat_activity',
      'datname = current_database() AND application_name = $1',
      [ORM_APPLICATION_NAME],
    );
    if (open === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await context.db.drop();
}

/** Rows of `table` matching `where`, counted through a separate `pg` connection. */
export async function count(
  db: TestDatabase,
  table: string,
  where = 'true',
  values: unknown[] = [],
): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM ${table} WHERE ${where}`,
    values,
  );
  return rows[0]!.n;
}
