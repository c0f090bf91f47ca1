/**
 * Everything after the agent: the orders example on a database, the polling dispatcher
 * publishing to an in-memory broker that fails now and then, and the consumers performing the
 * effects. `main.ts`, `agent.ts` and the end-to-end test share it, so they show the same path.
 */
import type { PGlite } from '@electric-sql/pglite';
import type pg from 'pg';
import {
  createLedger,
  pgliteTransactions,
  pgTransactions,
  type DeliveryResult,
} from '../../src/consumer/index.js';
import { bindInMemory, type InMemoryBinding } from '../../src/consumer/bindings/in-memory.js';
import {
  createDispatcher,
  fromPg,
  fromPglite,
  InMemoryPublisher,
  type Dispatcher,
  type FailureInjector,
  type OutgoingMessage,
  type SqlExecutor,
} from '../../src/index.js';
import { toEnvelope, type Envelope } from '../../src/publishers/envelope.js';
import {
  createOrdersExample,
  type FailureInjector as ToolFailureInjector,
  type OrdersExample,
} from '../orders/index.js';
import { createDemoConsumers, type DemoConsumers } from './consumers.js';
import { dispatchableCount, readMessageFacts } from './message-facts.js';

/** Options of {@link createDemoPipeline}. */
export interface DemoPipelineOptions {
  /** Embedded PGlite (the demo) or a `pg` Pool (the end-to-end test on real Postgres). */
  database: { pglite: PGlite } | { pool: pg.Pool };
  /** Where the mailer consumer writes one `.eml` file per mail. */
  mailboxDir: string;
  /** Progress lines; default none. */
  log?: (line: string) => void;
  /** Makes a tool throw midway (see examples/orders). */
  injectToolFailure?: ToolFailureInjector;
  /** Publish failures of the in-memory broker; default {@link transientBrokerFailures}. */
  injectPublishFailure?: FailureInjector;
}

/** What the pipeline counted while it ran. */
export interface PipelineCounters {
  /** Publish attempts that came back retryable (the dispatcher retries them with backoff). */
  publishRetries: number;
  /** Commit → publish latency of each published message, in ms. */
  latenciesMs: number[];
  /** Published messages by the attempt that succeeded (index 1 = first attempt). */
  publishedOnAttempt: number[];
  /** Consumer deliveries that performed the effect. */
  performed: number;
  /** Consumer deliveries the ledger recognised as already done. */
  consumerDuplicates: number;
  /** Consumer deliveries retried (e.g. a refund that arrived while its charge was still running). */
  consumerRetries: number;
  /** Consumer deliveries that ended dead. */
  consumerDead: number;
}

/** The running pipeline. */
export interface DemoPipeline {
  example: OrdersExample;
  publisher: InMemoryPublisher;
  dispatcher: Dispatcher;
  consumers: DemoConsumers;
  /** Runs single statements on the database (for checks and the report). */
  executor: SqlExecutor;
  counters: PipelineCounters;
  /** Starts the dispatcher's polling loop. */
  start(): void;
  /**
   * Resolves when every outbox message is dispatched (or dead-lettered) — except those held for
   * approval and what waits behind them — and the consumers have nothing in flight or waiting
   * for a retry. Rejects after `timeoutMs`.
   */
  settle(timeoutMs?: number): Promise<void>;
  /** Hands an already consumed message to its consumer again, as a broker redelivery would. */
  redeliver(message: OutgoingMessage): Promise<DeliveryResult>;
  /** Stops the dispatcher and the bindings, releases Kysely (the database stays open). */
  stop(): Promise<void>;
}

/**
 * The demo's broker weather: every 3rd outbox row fails its first publish attempt ("503"), every
 * 4th fails its first two ("timeout"). Deterministic, transient, always retryable.
 */
export const transientBrokerFailures: FailureInjector = (message) => {
  // A row id is `lane:id` on the lanes engine, the id alone on the claim engine.
  const row = Number(message.rowId.split(':').pop());
  if (row % 4 === 0 && message.attempts <= 2)
    return { status: 'retryable', error: 'injected: broker timed out' };
  if (row % 3 === 0 && message.attempts === 1)
    return { status: 'retryable', error: 'injected: broker unavailable (503)' };
  return undefined;
};

export function describe(message: {
  topic: string;
  aggregateId: string;
  sequence: number;
}): string {
  return `${message.topic.padEnd(14)} ${message.aggregateId} #${message.sequence}`;
}

/** The dispatcher settings both demo stories (PGlite and SQLite) run with. */
export const demoDispatchSettings = {
  pollIntervalMs: 50,
  // Demo-sized backoff: the reference's 30 s doubling would make the demo wait minutes.
  backoff: { baseMs: 50, maxMs: 500, jitterMs: 20 },
  maxAttempts: 5,
  unorderedTopics: ['mail.*'],
};

/** Counts and logs what the dispatcher does (published, retried, dead), for the report. */
export function logDispatcher(
  dispatcher: Dispatcher,
  counters: PipelineCounters,
  log: (line: string) => void,
): void {
  dispatcher.on('dispatcher:publish:outcome', ({ message, outcome }) => {
    if (outcome.status === 'published') {
      const latency = Date.now() - message.createdAt.getTime();
      counters.latenciesMs.push(latency);
      counters.publishedOnAttempt[message.attempts] =
        (counters.publishedOnAttempt[message.attempts] ?? 0) + 1;
      log(
        `[dispatch] published  ${describe(message)} (attempt ${message.attempts}, ${latency} ms after commit)`,
      );
    } else {
      if (outcome.status === 'retryable') counters.publishRetries++;
      log(
        `[dispatch] ${outcome.status.padEnd(10)} ${describe(message)} (attempt ${message.attempts}: ${outcome.error})`,
      );
    }
  });
  dispatcher.on('dispatcher:dead-letter', ({ message, error }) =>
    log(`[dispatch] DEAD       ${describe(message)}: ${error}`),
  );
}

/** The consumers' `onResult`: counts and logs each delivery's outcome, for the report. */
export function consumerLogger(
  counters: PipelineCounters,
  log: (line: string) => void,
): (consumer: string, result: DeliveryResult, message: Envelope | undefined) => void {
  return (consumer: string, result: DeliveryResult, message: Envelope | undefined) => {
    const what = message ? describe(message) : (result.messageId ?? '?');
    if (result.action === 'ack' && result.reason === 'processed') {
      counters.performed++;
      log(`[consume]  ${consumer.padEnd(8)} performed  ${what}`);
    } else if (result.action === 'ack' && result.reason === 'duplicate') {
      counters.consumerDuplicates++;
      log(`[consume]  ${consumer.padEnd(8)} duplicate  ${what}: already done, effect skipped`);
    } else if (result.action === 'retry') {
      counters.consumerRetries++;
      log(
        `[consume]  ${consumer.padEnd(8)} retry      ${what} (${result.reason}: ${result.detail ?? ''})`,
      );
    } else {
      if (result.action === 'dead') counters.consumerDead++;
      log(`[consume]  ${consumer.padEnd(8)} ${result.action} ${result.reason} ${what}`);
    }
  };
}

/** Wires the example, the dispatcher, the broker and the consumers; creates the tables. */
export async function createDemoPipeline(options: DemoPipelineOptions): Promise<DemoPipeline> {
  const log = options.log ?? (() => undefined);
  const database = options.database;
  const example = createOrdersExample({
    database,
    mailboxDir: options.mailboxDir,
    injectFailure: options.injectToolFailure,
  });
  await example.setup();

  // Each dispatcher statement stands alone, so the plain executor is right for both databases.
  // On PGlite (one connection) a statement issued while a tool's transaction is open waits for
  // PGlite's transaction lock instead of running inside that transaction.
  const executor = 'pglite' in database ? fromPglite(database.pglite) : fromPg(database.pool);
  const runner =
    'pglite' in database ? pgliteTransactions(database.pglite) : pgTransactions(database.pool);
  const counters: PipelineCounters = {
    publishRetries: 0,
    latenciesMs: [],
    publishedOnAttempt: [],
    performed: 0,
    consumerDuplicates: 0,
    consumerRetries: 0,
    consumerDead: 0,
  };

  const publisher = new InMemoryPublisher({
    inject: options.injectPublishFailure ?? transientBrokerFailures,
  });
  const dispatcher = createDispatcher({
    executor,
    publisher,
    ...demoDispatchSettings,
  });
  logDispatcher(dispatcher, counters, log);
  const onResult = consumerLogger(counters, log);
  const consumers = createDemoConsumers({
    ledger: createLedger({ runner }),
    provider: example.provider,
    mailbox: example.mailbox,
    onResult,
  });
  const bindings: InMemoryBinding[] = [consumers.payments, consumers.mailer].map((c) =>
    bindInMemory(publisher, c.consumer, { topics: c.topics, maxRetryDelayMs: 500 }),
  );

  const pendingCount = async () => dispatchableCount(await readMessageFacts(executor));

  return {
    example,
    publisher,
    dispatcher,
    consumers,
    executor,
    counters,
    start: () => dispatcher.start(),
    async settle(timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        if ((await pendingCount()) === 0) {
          await Promise.all(bindings.map((b) => b.onIdle()));
          return;
        }
        if (Date.now() > deadline)
          throw new Error(
            `outbox not drained after ${timeoutMs} ms: ${await pendingCount()} pending`,
          );
        dispatcher.wake();
        await new Promise((resolve) => setTimeout(resolve, 25));
      }
    },
    async redeliver(message) {
      const target = consumers.mailer.topics.includes(message.topic)
        ? consumers.mailer
        : consumers.payments;
      return target.consumer.handle(toEnvelope(message), { attempt: 2 });
    },
    async stop() {
      await dispatcher.stop();
      await Promise.all(bindings.map((b) => b.stop()));
      await example.close();
    },
  };
}

/**
 * The scripted failure both demos use: the user's FIRST create_order throws after writing its
 * order and messages (so it must roll back); the retry with the same key goes through.
 */
export function failFirstCreateOrderOf(userId: string): ToolFailureInjector {
  let failed = false;
  return (tool, input) => {
    if (tool !== 'create_order' || (input as { user_id?: string }).user_id !== userId) return false;
    if (failed) return false;
    failed = true;
    return true;
  };
}
