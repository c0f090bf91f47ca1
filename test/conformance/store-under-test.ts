import type { DeadLetter } from '../../src/admin/dead-letters.js';
import type { EnqueuedMessage, OutboxMessage } from '../../src/core/message.js';
import type { Dispatcher } from '../../src/dispatcher/dispatcher.js';
import type { DispatcherOptions } from '../../src/dispatcher/options.js';
import type { OutboxStore } from '../../src/dispatcher/outbox-store.js';
import type { CliProcess } from '../helpers/cli-process.js';

/**
 * What the conformance suite (store-conformance.ts) needs from a store, and nothing more: each
 * store (Postgres, SQLite, MariaDB) implements it in a few lines with its own writer,
 * dispatcher and admin calls, so the guarantees are tested once and a store cannot silently do
 * less. Every method runs real SQL on a real database of the store's kind.
 */
export interface StoreUnderTest {
  /** The `--database-url` that the CLI's `outbox dispatch` uses for this database. */
  readonly url: string;
  /**
   * One business transaction: inserts the order `orderId` into the business table `orders`, then
   * enqueues `messages` with the store's writer, then commits — or, with `failAfterEnqueue`,
   * throws after the enqueue so that the transaction rolls back (the error is rethrown).
   */
  writeOrder(
    orderId: string,
    messages: readonly OutboxMessage[],
    options?: { failAfterEnqueue?: boolean },
  ): Promise<EnqueuedMessage[]>;
  /** Enqueues with the writer on a connection that is NOT inside a transaction. */
  enqueueOutsideTransaction(message: OutboxMessage): Promise<unknown>;
  orders(): Promise<number>;
  /** Every outbox row, pending or not. */
  messages(): Promise<number>;
  /** Rows with a lease that has not been settled. */
  leased(): Promise<number>;
  /**
   * The most attempts any message took, dispatched or not (2 or more: one was claimed again).
   * Absent where publishing writes nothing per message (the lanes engine): a message published
   * again after a crash counts no attempt there, so the kill -9 test cannot see it in the table.
   */
  maxAttempts?(): Promise<number>;
  /** Rows neither dispatched nor dead-lettered. */
  pending(): Promise<number>;
  /** A polling dispatcher on this store (its own connections). */
  dispatcher(options: Omit<DispatcherOptions, 'executor' | 'store'>): Dispatcher;
  /**
   * The store itself, for claim and settle at the contract's level (fencing). Absent for an
   * engine that is no {@link OutboxStore} (the lanes engine fences by lane, not by claim): the
   * contract-level tests are then skipped with a printed reason.
   */
  store?(): OutboxStore;
  deadLetters(): Promise<DeadLetter[]>;
  /** Replays every dead letter; how many. */
  replayAllDead(): Promise<number>;
  /** Drops the database or file. */
  close(): Promise<void>;
}

/** A store the suite runs on: its name and how to make a fresh, migrated database of it. */
export interface ConformanceTarget {
  name: string;
  /** Undefined when the store's service is missing: the suite is skipped (or fails under CI). */
  available(): Promise<boolean>;
  open(): Promise<StoreUnderTest>;
  /**
   * Starts `outbox dispatch` with `args` in its own process: the CLI itself (startCli) unless
   * the target opens its database differently (SQLite through libsql).
   */
  dispatchProcess?(args: string[]): CliProcess;
}
