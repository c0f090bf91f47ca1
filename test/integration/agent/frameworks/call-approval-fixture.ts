import { afterAll, beforeAll } from 'vitest';
import { fromPg } from '../../../../src/index.js';
import type { SqlExecutor } from '../../../../src/store/sql-executor.js';
import { createTestDatabase, type TestDatabase } from '../../../helpers/database.js';
import { chargeDefinition, type ChargeDefinition } from './charge-definition.js';

/**
 * What the approval tests of every framework share (issue 42): a database, a `charge_order`
 * definition whose policy holds charges over 1000, and the counts the tests assert on — rows,
 * messages (held or not) and recorded approvals.
 */
export interface ApprovalShop {
  db: TestDatabase;
  executor: SqlExecutor;
  definition: ChargeDefinition;
  /** Charge rows of the order. */
  charges(orderId: number): Promise<number>;
  /** The order's messages: held (`awaiting`) or not (`null`). */
  messages(orderId: number): Promise<{ approval_state: string | null }[]>;
  /** The recorded approval of a call (undefined if none). */
  approval(callId: string): Promise<
    | {
        id: string;
        state: string;
        decided_by: string | null;
        reason: string | null;
        used_at: Date | null;
        state_ref: string | null;
      }
    | undefined
  >;
  /** Backdates an approval's expiry: the sweep then expires it. */
  backdate(callId: string): Promise<void>;
}

/** Registers the fixture's beforeAll/afterAll; the returned object is filled before tests run. */
export function approvalShop(): ApprovalShop {
  const shop = {} as ApprovalShop;
  beforeAll(async () => {
    const db = await createTestDatabase();
    await db.pool.query(
      'CREATE TABLE charges (id serial PRIMARY KEY, order_id int NOT NULL, amount int NOT NULL)',
    );
    shop.db = db;
    shop.executor = fromPg(db.pool);
    shop.definition = chargeDefinition(db.pool);
    shop.charges = async (orderId) =>
      (
        await db.pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM charges WHERE order_id = $1',
          [orderId],
        )
      ).rows[0]!.n;
    shop.messages = async (orderId) =>
      (
        await db.pool.query<{ approval_state: string | null }>(
          'SELECT approval_state FROM outbox WHERE aggregate_id = $1',
          [`order:${orderId}`],
        )
      ).rows;
    shop.approval = async (callId) =>
      (
        await db.pool.query(
          `SELECT id::text, state, decided_by, reason, used_at, state_ref
           FROM outbox_call_approvals WHERE call_id = $1`,
          [callId],
        )
      ).rows[0];
    shop.backdate = async (callId) => {
      await db.pool.query(
        `UPDATE outbox_call_approvals SET expires_at = now() - interval '1 second' WHERE call_id = $1`,
        [callId],
      );
    };
  });
  afterAll(() => shop.db?.drop());
  return shop;
}
