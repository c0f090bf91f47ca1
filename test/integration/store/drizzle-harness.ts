import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import type { PgDatabase, PgQueryResultHKT } from 'drizzle-orm/pg-core';
import { drizzleTransactions as agentTransactions } from '../../../src/agent/index.js';
import { drizzleTransactions as consumerTransactions } from '../../../src/consumer/index.js';
import { fromDrizzle, type FromDrizzleOptions } from '../../../src/index.js';
import type { OrmHarness } from './orm-harness.js';

const orders = pgTable('orders', {
  id: serial('id').primaryKey(),
  userId: text('user_id').notNull(),
  amount: integer('amount').notNull(),
});
const notes = pgTable('notes', {
  id: serial('id').primaryKey(),
  body: text('body').notNull(),
  traceId: text('trace_id').notNull(),
});
const charges = pgTable('charges', {
  id: serial('id').primaryKey(),
  messageId: text('message_id').notNull(),
  amount: integer('amount').notNull(),
});

/** The transaction object `db.transaction` hands out, for either driver. */
export type DrizzleTx<HKT extends PgQueryResultHKT> = Parameters<
  Parameters<PgDatabase<HKT>['transaction']>[0]
>[0];

/**
 * Drizzle as its users write it: the query builder on the `tx` of `db.transaction`, on either
 * driver. The runners take the user's `db` without casts: their types accept Drizzle's own.
 */
export function drizzleHarness<HKT extends PgQueryResultHKT>(
  db: PgDatabase<HKT>,
  options: FromDrizzleOptions & { preparesInsert: boolean; close(): Promise<void> },
): OrmHarness<DrizzleTx<HKT>> {
  return {
    transaction: (fn) => db.transaction(fn),
    executor: (trx) => fromDrizzle(trx, options),
    outsideExecutor: () => fromDrizzle(db, options),
    insertOrder: async (trx, order) => {
      const [row] = await trx.insert(orders).values(order).returning({ id: orders.id });
      return row!.id;
    },
    insertNote: async (trx, note) => {
      const [row] = await trx.insert(notes).values(note).returning({ id: notes.id });
      return row!.id;
    },
    insertCharge: async (trx, charge) => {
      await trx.insert(charges).values(charge);
    },
    agentTransactions: agentTransactions(db, options),
    consumerTransactions: consumerTransactions(db, options),
    preparesInsert: options.preparesInsert,
    close: options.close,
  };
}
