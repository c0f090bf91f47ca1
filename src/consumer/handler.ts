import type { Envelope } from '../publishers/envelope.js';
import type { SqlExecutor } from '../store/sql-executor.js';

/** What every handler receives besides the message. */
export interface HandlerContext {
  /**
   * The message id. Pass it to external APIs as their idempotency key (Stripe `Idempotency-Key`,
   * an email provider's dedup id): it is what makes a retried claim-first effect act once.
   */
  idempotencyKey: string;
  /** Delivery attempt reported by the broker binding (1 = first), when the broker tells. */
  attempt: number | undefined;
  /**
   * Aborted when continuing is pointless: in claim-first mode, when the claim was lost to
   * another process (the lease could not be renewed). Pass it to `fetch` and SDK calls.
   */
  signal: AbortSignal;
}

/**
 * Context of a `transactional` handler. `Trx` is the runner's own transaction object (see the
 * ledger's `TransactionRunner`).
 */
export interface TransactionalContext<Trx = unknown> extends HandlerContext {
  /**
   * The open transaction. Write the effect here: the ledger row is written in the same
   * transaction, so the effect and its record commit — or roll back — together.
   */
  tx: SqlExecutor;
  /**
   * The same transaction as your client's own object — Drizzle's or Prisma's `tx`, postgres.js's
   * transaction `sql`, the `pg` client — to write the effect through your ORM instead of `tx`.
   */
  trx: Trx;
}

/** Context of a `claim-first` handler. */
export interface ClaimFirstContext extends HandlerContext {
  /**
   * True when an earlier delivery claimed this message and its lease ran out before it recorded
   * `done` (it crashed, maybe after the effect): the idempotency key must stop a second effect.
   */
  takeover: boolean;
}

/**
 * Performs one message's effect. Resolve when the effect is done; throw to have the message
 * retried (`PermanentError`: dead-lettered; `DeferError`: retried later without counting as a
 * failure).
 */
export type Handler<C extends HandlerContext = HandlerContext> = (
  message: Envelope,
  context: C,
) => Promise<void>;

/** Wraps a handler to add behaviour (budget, timeout, logging): `(next) => Handler`. */
export type HandlerMiddleware<C extends HandlerContext = HandlerContext> = (
  next: Handler<C>,
) => Handler<C>;
