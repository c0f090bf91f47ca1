/**
 * Base class of every error agent-outbox throws on purpose. `code` is stable and meant for
 * programs; `message` is meant for people and says what to do.
 */
export class OutboxError extends Error {
  /** Stable machine-readable code, e.g. `OUTBOX_VALIDATION`. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OutboxError';
    this.code = code;
  }
}

/**
 * A message (or an option) was rejected before anything was written. `field` names the offending
 * field with its position in the batch, e.g. `messages[3].payload`.
 */
export class OutboxValidationError extends OutboxError {
  /** Path of the rejected field, e.g. `messages[0].topic`. */
  readonly field: string;

  constructor(field: string, problem: string) {
    super('OUTBOX_VALIDATION', `${field}: ${problem}`);
    this.name = 'OutboxValidationError';
    this.field = field;
  }
}

/** The database schema is missing or older than this version of agent-outbox expects. */
export class OutboxSchemaError extends OutboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('OUTBOX_SCHEMA', message, options);
    this.name = 'OutboxSchemaError';
  }
}

/**
 * `enqueue(…, { onDuplicate: 'reject' })` met a message whose `dedupeKey` was already written
 * within the dedupe window. Nothing of that call was written; the transaction is still usable.
 */
export class OutboxDuplicateError extends OutboxError {
  /** The key that was already taken. */
  readonly dedupeKey: string;
  /** The message id of the message written first with that key. */
  readonly messageId: string;

  constructor(dedupeKey: string, messageId: string) {
    super(
      'OUTBOX_DUPLICATE',
      `dedupeKey ${JSON.stringify(dedupeKey)} was already written within the dedupe window, as message ${messageId}; nothing was written. Drop onDuplicate: 'reject' to be answered with that message (deduped: true) instead`,
    );
    this.name = 'OutboxDuplicateError';
    this.dedupeKey = dedupeKey;
    this.messageId = messageId;
  }
}

/**
 * `enqueue()` was handed an executor that is not inside a transaction: a `pg` Pool, a client that
 * never ran `BEGIN`, an ORM's top-level object instead of the transaction it hands you. Its rows
 * would commit on their own, apart from the business rows they belong with. Nothing was written;
 * the message says what to pass instead. A lone message on purpose: `{ allowAutocommit: true }`.
 */
export class OutboxAutocommitError extends OutboxError {
  constructor(message: string) {
    super('OUTBOX_AUTOCOMMIT', message);
    this.name = 'OutboxAutocommitError';
  }
}

/**
 * A statement failed because of how a connection pooler in transaction mode (PgBouncer,
 * Supavisor, Neon's `-pooler` endpoints, RDS Proxy) hands out server connections — a prepared
 * statement missing on the server connection this transaction got. The message says which
 * option to set; `cause` is the driver's error.
 */
export class OutboxPoolerError extends OutboxError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('OUTBOX_POOLER', message, options);
    this.name = 'OutboxPoolerError';
  }
}

/** `error` as an Error: a thrown non-Error becomes one with its text as the message. */
export function toError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
