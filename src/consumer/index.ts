/**
 * agent-outbox/consumer — the idempotent consumer runtime (SPEC §4.7). Broker bindings live in
 * their own entry points (`agent-outbox/consumer/nats`, `/rabbitmq`, `/redis`, `/http`,
 * `/memory`) so this one imports no broker client.
 * @packageDocumentation
 */
export {
  createConsumer,
  type ClaimFirstConsumerOptions,
  type Consumer,
  type ConsumerBaseOptions,
  type ConsumerOptions,
  type DeliveryMeta,
  type TransactionalConsumerOptions,
} from './create-consumer.js';
export { ack, dead, retry, type DeliveryReason, type DeliveryResult } from './delivery-result.js';
export { DeferError, PermanentError } from './errors.js';
export type {
  ClaimFirstContext,
  Handler,
  HandlerContext,
  HandlerMiddleware,
  TransactionalContext,
} from './handler.js';
export {
  createLedger,
  type ClaimOutcome,
  type ConsumerLedger,
  type LedgerOptions,
  type LedgerTransaction,
} from './ledger.js';
export {
  checkOrder,
  orderCheckFor,
  type OrderCheck,
  type OrderingOptions,
  type OrderVerdict,
} from './ordering.js';
export {
  drizzleTransactions,
  postgresJsTransactions,
  prismaTransactions,
} from './orm-transactions.js';
export {
  pgliteTransactions,
  pgTransactions,
  type PgliteLike,
  type PgPoolLike,
  type PgTransactionsOptions,
  type TransactionRunner,
} from './transaction-runner.js';
export {
  BudgetBreaker,
  createBudgetBreaker,
  withBudget,
  type BudgetContext,
  type BudgetEventMap,
  type BudgetOptions,
  type BudgetState,
} from './budget-breaker.js';
export {
  DEFAULT_LEDGER_RETENTION_MS,
  pruneLedger,
  type PruneLedgerOptions,
  type PruneLedgerResult,
} from './prune-ledger.js';
