import { OutboxValidationError } from './errors.js';
import { checkKnownFields } from './known-fields.js';
import type { OutboxMessage } from './message.js';

/** Limits applied by {@link validateMessages}. */
export interface ValidationLimits {
  /** Largest serialised payload in bytes. Default 1 MiB. */
  maxPayloadBytes: number;
  /** Largest serialised headers object in bytes. Default 64 KiB. */
  maxHeadersBytes: number;
}

export const DEFAULT_LIMITS: ValidationLimits = {
  maxPayloadBytes: 1024 * 1024,
  maxHeadersBytes: 64 * 1024,
};

/** Longest topic or aggregate id, in characters. Matches the CHECK constraints of the table. */
export const MAX_NAME_LENGTH = 255;

/** A message after validation: everything the insert statement needs, already serialised. */
export interface ValidMessage {
  topic: string;
  aggregateId: string;
  /** The payload as JSON text (what will be stored). */
  payloadJson: string;
  headers: Record<string, string>;
  availableAt: Date | undefined;
  delayMs: number;
  shadow: boolean;
  /** `undefined`: decided by `outbox_unordered_topics` when written (migration 009). */
  ordered: boolean | undefined;
  /** Set when the message is written held for approval (migration 010). */
  approval:
    | {
        expiresInMs: number | undefined;
        requestedBy: string | undefined;
        /** `'approve'`: approved by the expiry sweep (migration 013); else expired. */
        onExpiry: 'reject' | 'approve';
      }
    | undefined;
  /** The message's `dedupeKey` (migration 013), when it has one. */
  dedupeKey: string | undefined;
}

/** Longest time a held message may wait for a decision: about ten years, in ms. */
const MAX_APPROVAL_EXPIRY_MS = 10 * 366 * 86_400_000;

// Postgres text and jsonb cannot hold NUL, and jsonb rejects unpaired UTF-16 surrogates; both
// would otherwise fail deep inside the driver with a message that names no field.
// eslint-disable-next-line no-control-regex
const NUL = /\u0000/;
// TextEncoder rather than Buffer: this module also runs in Workers without nodejs_compat.
const utf8 = new TextEncoder();
/**
 * The UTF-8 size of `text` when it is over `limit`, else undefined. A UTF-16 code unit is at most
 * 3 UTF-8 bytes, so text of up to limit/3 units is not measured at all: encoding every payload
 * only to learn its length allocated a copy of it on every enqueue.
 */
const bytesOver = (text: string, limit: number): number | undefined => {
  if (text.length * 3 <= limit) return undefined;
  const bytes = utf8.encode(text).length;
  return bytes > limit ? bytes : undefined;
};
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * What {@link checkText} looks for, in one pass: a NUL or any surrogate. Most text has neither,
 * and then one scan is all it costs (two regular expressions, one of them with a lookbehind, ran
 * on every string of every payload before).
 */
// eslint-disable-next-line no-control-regex
const SUSPECT = /[\u0000\uD800-\uDFFF]/;

function checkText(field: string, value: string): void {
  if (!SUSPECT.test(value)) return;
  if (NUL.test(value))
    throw new OutboxValidationError(
      field,
      'contains a NUL character (\\u0000), which Postgres cannot store',
    );
  if (LONE_SURROGATE.test(value))
    throw new OutboxValidationError(
      field,
      'contains an unpaired UTF-16 surrogate, which is not valid Unicode',
    );
}

/** A topic or aggregate id: a non-empty string of at most {@link MAX_NAME_LENGTH} characters. */
export function checkName(field: string, value: unknown): string {
  if (typeof value !== 'string') {
    throw new OutboxValidationError(
      field,
      `must be a string, got ${describe(value)}${typeof value === 'number' ? ' (use String(value))' : ''}`,
    );
  }
  if (value.length === 0 || value.trim().length === 0)
    throw new OutboxValidationError(field, 'must not be empty');
  if (value.length > MAX_NAME_LENGTH) {
    throw new OutboxValidationError(
      field,
      `is ${value.length} characters long; the limit is ${MAX_NAME_LENGTH}`,
    );
  }
  checkText(field, value);
  return value;
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'an object';
  return typeof value;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/**
 * Walks a payload and rejects what JSON.stringify would drop, change or choke on silently:
 * cycles, BigInt, functions, symbols, undefined (at the top or in arrays), NaN/Infinity, and
 * objects such as Map or Set that serialise to `{}`. Dates are allowed (they become ISO text).
 *
 * `path` is where `value` sits (the field, then keys and indexes), kept as a stack and rendered
 * only for an error: building every node's path as text cost more than the checks themselves
 * (a payload of 20 small objects: 33 µs a message before, measured in a loop).
 */
function checkJson(path: (string | number)[], value: unknown, ancestors: Set<object>): void {
  switch (typeof value) {
    case 'string':
      // The path is rendered only for a string worth a closer look.
      if (SUSPECT.test(value)) checkText(pathText(path), value);
      return;
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value))
        throw new OutboxValidationError(pathText(path), `${value} is not representable in JSON`);
      return;
    case 'bigint':
      throw new OutboxValidationError(
        pathText(path),
        'is a BigInt, which JSON cannot represent: convert it to a string',
      );
    case 'undefined':
      throw new OutboxValidationError(
        pathText(path),
        'is undefined, which JSON cannot represent: use null or omit it',
      );
    case 'function':
    case 'symbol':
      throw new OutboxValidationError(
        pathText(path),
        `is a ${typeof value}, which JSON cannot represent`,
      );
  }
  if (value === null) return;
  const object = value as object;
  if (object instanceof Date) {
    if (Number.isNaN(object.getTime()))
      throw new OutboxValidationError(pathText(path), 'is an invalid Date');
    return;
  }
  if (ancestors.has(object))
    throw new OutboxValidationError(pathText(path), 'is a circular reference');
  ancestors.add(object);
  if (Array.isArray(object)) {
    for (let index = 0; index < object.length; index++) {
      // A hole is skipped, as forEach did (JSON writes null for it).
      if (!(index in object)) continue;
      path.push(index);
      checkJson(path, object[index], ancestors);
      path.pop();
    }
  } else if (isPlainObject(object)) {
    // A plain object's prototype (Object.prototype or null) has no enumerable keys: for-in sees
    // exactly Object.keys, without allocating the entries.
    for (const key in object) {
      if (SUSPECT.test(key)) checkText(`${pathText(path)} key ${JSON.stringify(key)}`, key);
      const item = (object as Record<string, unknown>)[key];
      // An undefined property is simply omitted by JSON, as in any JS object literal.
      if (item === undefined) continue;
      path.push(key);
      checkJson(path, item, ancestors);
      path.pop();
    }
  } else {
    throw new OutboxValidationError(
      pathText(path),
      `is a ${describe(object)}, which does not serialise to JSON faithfully: convert it to a plain object or array`,
    );
  }
  ancestors.delete(object);
}

/** `messages[0].payload.items[3].sku`: the first entry is the field, then keys and indexes. */
function pathText(path: readonly (string | number)[]): string {
  let text = String(path[0]);
  for (let i = 1; i < path.length; i++) {
    const part = path[i]!;
    text += typeof part === 'number' ? `[${part}]` : `.${part}`;
  }
  return text;
}

function checkHeaders(
  field: string,
  headers: unknown,
  limits: ValidationLimits,
): Record<string, string> {
  if (headers === undefined) return {};
  if (!isPlainObject(headers))
    throw new OutboxValidationError(
      field,
      `must be a plain object of string to string, got ${describe(headers)}`,
    );
  const result: Record<string, string> = {};
  for (const [key, value] of Object.entries(headers)) {
    if (key.length === 0) throw new OutboxValidationError(field, 'has an empty header name');
    checkText(`${field} key ${JSON.stringify(key)}`, key);
    if (typeof value !== 'string') {
      throw new OutboxValidationError(
        `${field}.${key}`,
        `must be a string, got ${describe(value)}`,
      );
    }
    checkText(`${field}.${key}`, value);
    result[key] = value;
  }
  const bytes = bytesOver(JSON.stringify(result), limits.maxHeadersBytes);
  if (bytes !== undefined) {
    throw new OutboxValidationError(
      field,
      `is ${bytes} bytes serialised; the limit is ${limits.maxHeadersBytes}`,
    );
  }
  return result;
}

function checkApproval(prefix: string, m: Partial<OutboxMessage>): ValidMessage['approval'] {
  if (m.requiresApproval !== undefined && typeof m.requiresApproval !== 'boolean') {
    throw new OutboxValidationError(
      `${prefix}.requiresApproval`,
      `must be a boolean, got ${describe(m.requiresApproval)}`,
    );
  }
  const held = m.requiresApproval === true;
  for (const field of ['approvalExpiresInMs', 'approvalRequestedBy', 'approvalOnExpiry'] as const) {
    if (m[field] !== undefined && !held)
      throw new OutboxValidationError(
        `${prefix}.${field}`,
        'only applies to a message with requiresApproval: true',
      );
  }
  if (!held) return undefined;
  const expiresInMs = m.approvalExpiresInMs;
  if (
    expiresInMs !== undefined &&
    (typeof expiresInMs !== 'number' ||
      !Number.isFinite(expiresInMs) ||
      expiresInMs <= 0 ||
      expiresInMs > MAX_APPROVAL_EXPIRY_MS)
  ) {
    throw new OutboxValidationError(
      `${prefix}.approvalExpiresInMs`,
      `must be a number of milliseconds > 0 and at most ten years, got ${String(expiresInMs)}`,
    );
  }
  const requestedBy =
    m.approvalRequestedBy === undefined
      ? undefined
      : checkName(`${prefix}.approvalRequestedBy`, m.approvalRequestedBy);
  const onExpiry = m.approvalOnExpiry ?? 'reject';
  if (onExpiry !== 'reject' && onExpiry !== 'approve')
    throw new OutboxValidationError(
      `${prefix}.approvalOnExpiry`,
      `must be 'reject' or 'approve', got ${JSON.stringify(m.approvalOnExpiry)}`,
    );
  return { expiresInMs, requestedBy, onExpiry };
}

/**
 * Validates one message. Throws {@link OutboxValidationError} naming the field; returns the
 * serialised form on success. `prefix` locates the message in its batch (`messages[3]`).
 */
export function validateMessage(
  message: unknown,
  limits: ValidationLimits = DEFAULT_LIMITS,
  prefix = 'message',
): ValidMessage {
  if (!isPlainObject(message))
    throw new OutboxValidationError(prefix, `must be an object, got ${describe(message)}`);
  const m = message as Partial<OutboxMessage> & Record<string, unknown>;
  checkKnownFields(prefix, m);
  const topic = checkName(`${prefix}.topic`, m.topic);
  const aggregateId = checkName(`${prefix}.aggregateId`, m.aggregateId);

  if (!('payload' in m))
    throw new OutboxValidationError(
      `${prefix}.payload`,
      'is missing (use null for an empty payload)',
    );
  checkJson([`${prefix}.payload`], m.payload, new Set());
  const payloadJson = JSON.stringify(m.payload);
  const payloadBytes = bytesOver(payloadJson, limits.maxPayloadBytes);
  if (payloadBytes !== undefined) {
    throw new OutboxValidationError(
      `${prefix}.payload`,
      `is ${payloadBytes} bytes serialised; the limit is ${limits.maxPayloadBytes} (raise maxPayloadBytes, or store the body elsewhere and send a reference)`,
    );
  }

  const headers = checkHeaders(`${prefix}.headers`, m.headers, limits);
  if (m.schemaVersion !== undefined) {
    if (
      typeof m.schemaVersion === 'number'
        ? !Number.isFinite(m.schemaVersion)
        : typeof m.schemaVersion !== 'string' || m.schemaVersion.length === 0
    ) {
      throw new OutboxValidationError(
        `${prefix}.schemaVersion`,
        'must be a non-empty string or a finite number',
      );
    }
  }
  if (m.tenantId !== undefined) checkName(`${prefix}.tenantId`, m.tenantId);

  if (m.delayMs !== undefined && m.availableAt !== undefined) {
    throw new OutboxValidationError(
      `${prefix}.delayMs`,
      'give either delayMs or availableAt, not both',
    );
  }
  let delayMs = 0;
  if (m.delayMs !== undefined) {
    if (typeof m.delayMs !== 'number' || !Number.isFinite(m.delayMs) || m.delayMs < 0) {
      throw new OutboxValidationError(
        `${prefix}.delayMs`,
        `must be a finite number >= 0, got ${String(m.delayMs)}`,
      );
    }
    delayMs = m.delayMs;
  }
  let availableAt: Date | undefined;
  if (m.availableAt !== undefined) {
    if (!(m.availableAt instanceof Date) || Number.isNaN(m.availableAt.getTime())) {
      throw new OutboxValidationError(`${prefix}.availableAt`, 'must be a valid Date');
    }
    availableAt = m.availableAt;
  }
  if (m.shadow !== undefined && typeof m.shadow !== 'boolean') {
    throw new OutboxValidationError(
      `${prefix}.shadow`,
      `must be a boolean, got ${describe(m.shadow)}`,
    );
  }
  if (m.ordered !== undefined && typeof m.ordered !== 'boolean') {
    throw new OutboxValidationError(
      `${prefix}.ordered`,
      `must be a boolean, got ${describe(m.ordered)}`,
    );
  }
  return {
    topic,
    aggregateId,
    payloadJson,
    headers,
    availableAt,
    delayMs,
    shadow: m.shadow === true,
    ordered: m.ordered,
    approval: checkApproval(prefix, m),
    dedupeKey:
      m.dedupeKey === undefined ? undefined : checkName(`${prefix}.dedupeKey`, m.dedupeKey),
  };
}

/** Validates every message of a batch before any is written; the first bad one throws. */
export function validateMessages(
  messages: readonly unknown[],
  limits: ValidationLimits = DEFAULT_LIMITS,
): ValidMessage[] {
  return messages.map((message, index) => validateMessage(message, limits, `messages[${index}]`));
}

/** Checks user-supplied limits (positive integers). */
export function resolveLimits(options: Partial<ValidationLimits>): ValidationLimits {
  const limits = { ...DEFAULT_LIMITS, ...stripUndefined(options) };
  for (const [key, value] of Object.entries(limits)) {
    if (!Number.isInteger(value) || value <= 0)
      throw new OutboxValidationError(key, `must be a positive integer, got ${String(value)}`);
  }
  return limits;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as Partial<T>;
}
