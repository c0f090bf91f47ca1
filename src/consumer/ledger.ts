import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import {
  claimSql,
  completeClaimSql,
  ledgerStateSql,
  recordDoneSql,
  releaseClaimSql,
  renewClaimSql,
} from '../sql/consumer-ledger.js';
import {
  advancePositionSql,
  ensurePositionSql,
  lockPositionSql,
  readPositionSql,
} from '../sql/consumer-positions.js';
import type { TransactionRunner } from './transaction-runner.js';

/** Outcome of {@link ConsumerLedger.claim}. */
export type ClaimOutcome =
  /** This delivery owns the message until the lease ends. `token` fences renew/release. */
  | { status: 'acquired'; token: string; takeover: boolean }
  /** The effect is already recorded. */
  | { status: 'done' }
  /** Another delivery holds a live claim for `remainingMs` more. */
  | { status: 'held'; remainingMs: number };

/** Statements that run inside one transaction of the transactional mode. */
export interface LedgerTransaction<Trx = unknown> {
  /** The transaction, for the handler's own writes. */
  readonly executor: SqlExecutor;
  /** The same transaction as the runner's own object (an ORM's `tx`), for the handler. */
  readonly trx: Trx;
  /**
   * Records the message as done in this transaction. Waits for a concurrent transaction that
   * recorded it first; returns false when the message was already recorded (a duplicate).
   */
  recordDone(consumer: string, messageId: string): Promise<boolean>;
  /** Locks the (consumer, aggregate) position until commit and returns its last sequence. */
  lockPosition(consumer: string, aggregateId: string): Promise<number>;
  /** Moves the position forward to `sequence` (never backward). */
  advancePosition(consumer: string, aggregateId: string, sequence: number): Promise<void>;
}

/**
 * The consumer ledger: which (consumer, message) effects happened, and the per-aggregate
 * positions. Create one with {@link createLedger}; a consumer built by `createConsumer` uses it.
 */
export interface ConsumerLedger<Trx = unknown> {
  /** Schema (unquoted) holding `processed_messages` and `consumer_positions`. */
  readonly schema: string;
  /** Runs `fn` in one transaction, committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: LedgerTransaction<Trx>) => Promise<T>): Promise<T>;
  /** Claim-first: claims the message for `leaseMs`, in its own short statement. */
  claim(consumer: string, messageId: string, leaseMs: number): Promise<ClaimOutcome>;
  /** Claim-first: extends a live claim; returns the new token, or undefined if it was lost. */
  renew(
    consumer: string,
    messageId: string,
    token: string,
    leaseMs: number,
  ): Promise<string | undefined>;
  /**
   * Claim-first: records the effect as done, and advances the aggregate position when given, in
   * one transaction.
   */
  complete(
    consumer: string,
    messageId: string,
    position?: { aggregateId: string; sequence: number },
  ): Promise<void>;
  /** Claim-first: drops this delivery's claim so the next delivery can run at once. */
  release(consumer: string, messageId: string, token: string): Promise<void>;
  /** Last processed sequence of (consumer, aggregate), 0 when none. Does not lock. */
  position(consumer: string, aggregateId: string): Promise<number>;
  /** Ledger state of one message: `claimed`, `done`, or undefined when absent. */
  state(consumer: string, messageId: string): Promise<'claimed' | 'done' | undefined>;
}

/** Options of {@link createLedger}. */
export interface LedgerOptions<Trx = unknown> {
  /** Opens the transactions and runs the single statements. */
  runner: TransactionRunner<Trx>;
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
}

/**
 * Creates the Postgres ledger over the `processed_messages` and `consumer_positions` tables
 * (migrations 001 and 003).
 *
 * @example
 * ```ts
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * const ledger = createLedger({ runner: pgTransactions(pool) });
 * ```
 */
export function createLedger<Trx = unknown>(options: LedgerOptions<Trx>): ConsumerLedger<Trx> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const s = quoteIdentifier(schema);
  const { runner } = options;
  const sql = {
    recordDone: recordDoneSql(s),
    state: ledgerStateSql(s),
    claim: claimSql(s),
    renew: renewClaimSql(s),
    complete: completeClaimSql(s),
    release: releaseClaimSql(s),
    ensurePosition: ensurePositionSql(s),
    lockPosition: lockPositionSql(s),
    readPosition: readPositionSql(s),
    advance: advancePositionSql(s),
  };

  const stateOf = async (executor: SqlExecutor, consumer: string, messageId: string) => {
    const { rows } = await executor.query<{
      state: 'claimed' | 'done';
      remaining_ms: number | null;
    }>(sql.state, [consumer, messageId]);
    return rows[0];
  };

  const advance = async (
    executor: SqlExecutor,
    consumer: string,
    aggregateId: string,
    sequence: number,
  ) => {
    await executor.query(sql.advance, [consumer, aggregateId, sequence]);
  };

  return {
    schema,
    transaction: (fn) =>
      runner.transaction((executor, trx) =>
        fn({
          executor,
          trx,
          async recordDone(consumer, messageId) {
            const { rows } = await executor.query(sql.recordDone, [consumer, messageId]);
            return rows.length === 1;
          },
          async lockPosition(consumer, aggregateId) {
            await executor.query(sql.ensurePosition, [consumer, aggregateId]);
            const { rows } = await executor.query<{ last_sequence: string }>(sql.lockPosition, [
              consumer,
              aggregateId,
            ]);
            return Number(rows[0]?.last_sequence ?? 0);
          },
          advancePosition: (consumer, aggregateId, sequence) =>
            advance(executor, consumer, aggregateId, sequence),
        }),
      ),

    async claim(consumer, messageId, leaseMs) {
      const { rows } = await runner.query<{ token: string; takeover: boolean }>(sql.claim, [
        consumer,
        messageId,
        leaseMs,
      ]);
      const claimed = rows[0];
      if (claimed) return { status: 'acquired', token: claimed.token, takeover: claimed.takeover };
      const row = await stateOf(runner, consumer, messageId);
      if (row?.state === 'done') return { status: 'done' };
      // Absent here means the holder released between our two statements: try again soon.
      return { status: 'held', remainingMs: Math.max(0, Math.ceil(row?.remaining_ms ?? 0)) };
    },

    async renew(consumer, messageId, token, leaseMs) {
      const { rows } = await runner.query<{ token: string }>(sql.renew, [
        consumer,
        messageId,
        token,
        leaseMs,
      ]);
      return rows[0]?.token;
    },

    async complete(consumer, messageId, position) {
      if (!position) {
        await runner.query(sql.complete, [consumer, messageId]);
        return;
      }
      await runner.transaction(async (executor) => {
        await executor.query(sql.complete, [consumer, messageId]);
        await advance(executor, consumer, position.aggregateId, position.sequence);
      });
    },

    async release(consumer, messageId, token) {
      await runner.query(sql.release, [consumer, messageId, token]);
    },

    async position(consumer, aggregateId) {
      const { rows } = await runner.query<{ last_sequence: string }>(sql.readPosition, [
        consumer,
        aggregateId,
      ]);
      return Number(rows[0]?.last_sequence ?? 0);
    },

    async state(consumer, messageId) {
      return (await stateOf(runner, consumer, messageId))?.state;
    },
  };
}
