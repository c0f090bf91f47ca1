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
