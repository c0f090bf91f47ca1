import { createHmac, timingSafeEqual } from 'node:crypto';
import { OutboxValidationError } from './errors.js';

/**
 * Signed, expiring approval links: a person decides from a link in Slack or an email. The token
 * names one held message, the person (or channel) it was sent to and its deadline, signed with
 * HMAC-SHA256 — no table: the handler needs only the secrets. A token cannot decide twice: the
 * decision itself is the record (the message is no longer `awaiting`), so a replayed token meets
 * a decided message and is refused, as every second decision is (first decision wins).
 *
 * Format: `base64url(JSON payload) "." base64url(HMAC-SHA256(secret, first part))`, payload
 * `{ v: 1, m: messageId, exp: ms since epoch, by?: who }`.
 */

/** Options of {@link approvalLink}. */
export interface ApprovalLinkOptions {
  /** Where {@link createApprovalHandler}'s handler is served, e.g. `https://ops.example.com/approve`. */
  url: string;
  /** The signing secret (at least 32 characters): the first of the handler's `secrets`. */
  secret: string;
  /** How long the link works, in milliseconds. Default 24 hours. */
  ttlMs?: number;
  /**
   * Who the link is for (`alice@example.com`, `slack:#payments`): recorded as the decider, with
   * `via approval link`. Default `approval link`.
   */
  by?: string;
  /** The current time in ms, for tests. Default `Date.now()`. */
  now?: number;
}

/** What a valid token says. */
export interface ApprovalToken {
  messageId: string;
  expiresAt: Date;
  by: string | undefined;
}

/** Why a token was refused: tampered or malformed (401), or past its deadline (410). */
export class ApprovalTokenError extends Error {
  constructor(
    readonly reason: 'invalid' | 'expired',
    message: string,
  ) {
    super(message);
    this.name = 'ApprovalTokenError';
  }
}

const DEFAULT_TTL_MS = 24 * 60 * 60 * 1000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A secret strong enough to sign with; the same check for signing and verifying. */
export function checkSecret(field: string, secret: unknown): string {
  if (typeof secret !== 'string' || secret.length < 32)
    throw new OutboxValidationError(
      field,
      'must be a string of at least 32 characters (e.g. crypto.randomBytes(32).toString("base64url"))',
    );
  return secret;
}

const sign = (secret: string, body: string) =>
  createHmac('sha256', secret).update(body).digest('base64url');

/**
 * A link that lets a person approve or reject one held message until it expires. Opening it
 * shows the message and two buttons; only the button (a POST) decides, so a chat app previewing
 * the link decides nothing.
 *
 * @example
 * ```ts
 * const link = approvalLink(enqueued, {
 *   url: 'https://ops.example.com/approve',
 *   secret: process.env.APPROVAL_SECRET!,
 *   ttlMs: 4 * 60 * 60 * 1000,
 *   by: 'alice@example.com',
 * });
 * ```
 */
export function approvalLink(message: { messageId: string }, options: ApprovalLinkOptions): string {
  if (typeof message?.messageId !== 'string' || !UUID.test(message.messageId))
    throw new OutboxValidationError('message.messageId', 'must be a message id (UUID)');
  const secret = checkSecret('secret', options.secret);
  const ttlMs = options.ttlMs ?? DEFAULT_TTL_MS;
  if (!Number.isInteger(ttlMs) || ttlMs < 1)
    throw new OutboxValidationError('ttlMs', `must be a positive integer, got ${String(ttlMs)}`);
  let url: URL;
  try {
    url = new URL(options.url);
  } catch {
    throw new OutboxValidationError('url', `must be an absolute URL, got ${String(options.url)}`);
  }
  if (options.by !== undefined && (typeof options.by !== 'string' || options.by.length > 200))
    throw new OutboxValidationError('by', 'must be a string of at most 200 characters');
  const payload = {
    v: 1,
    m: message.messageId.toLowerCase(),
    exp: (options.now ?? Date.now()) + ttlMs,
    ...(options.by ? { by: options.by } : {}),
  };
  const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
  url.searchParams.set('token', `${body}.${sign(secret, body)}`);
  return url.toString();
}

/**
 * Checks a token against every secret (the first signs new links; keep an old one in the list
 * while its links are still out). Throws {@link ApprovalTokenError}.
 */
export function verifyApprovalToken(
  token: unknown,
  secrets: readonly string[],
  now = Date.now(),
): ApprovalToken {
  if (typeof token !== 'string' || token.length > 2048)
    throw new ApprovalTokenError('invalid', 'no approval token');
  const [body, signature, extra] = token.split('.');
  if (!body || !signature || extra !== undefined)
    throw new ApprovalTokenError('invalid', 'malformed approval token');
  const given = Buffer.from(signature, 'base64url');
  const valid = secrets.some((secret) => {
    const expected = Buffer.from(sign(secret, body), 'base64url');
    return expected.length === given.length && timingSafeEqual(expected, given);
  });
  if (!valid) throw new ApprovalTokenError('invalid', 'the approval token is not valid');
  let payload: { v?: unknown; m?: unknown; exp?: unknown; by?: unknown };
  try {
    payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as typeof payload;
  } catch {
    throw new ApprovalTokenError('invalid', 'malformed approval token');
  }
  if (
    payload.v !== 1 ||
    typeof payload.m !== 'string' ||
    !UUID.test(payload.m) ||
    typeof payload.exp !== 'number' ||
    (payload.by !== undefined && typeof payload.by !== 'string')
  )
    throw new ApprovalTokenError('invalid', 'malformed approval token');
  if (payload.exp <= now) throw new ApprovalTokenError('expired', 'this approval link has expired');
  return { messageId: payload.m, expiresAt: new Date(payload.exp), by: payload.by };
}
