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
 * `{ v: 1, m: messageId, exp: ms since epoch, by?: who }` for a held message, or
 * `{ v: 1, c: digits of call-<n>, exp, by? }` for a paused tool call (issue 42).
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

/** What a valid token says: a held message (`messageId`) or a paused tool call (`approvalId`). */
export type ApprovalToken =
  | { messageId: string; approvalId?: undefined; expiresAt: Date; by: string | undefined }
  | { approvalId: string; messageId?: undefined; expiresAt: Date; by: string | undefined };

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
/** A paused call's approval id as `outbox approvals` lists it; the token carries the digits. */
const CALL_APPROVAL = /^call-([0-9]{1,19})$/;

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
export function approvalLink(
  target: { messageId: string } | { approvalId: string },
  options: ApprovalLinkOptions,
): string {
  let subject: { m: string } | { c: string };
  if (target && 'approvalId' in target && target.approvalId !== undefined) {
    const call =
      typeof target.approvalId === 'string' ? CALL_APPROVAL.exec(target.approvalId) : null;
    if (!call)
      throw new OutboxValidationError(
        'approvalId',
        'must be a call approval id (call-<digits>, as outbox approvals lists it)',
      );
    subject = { c: call[1]! };
  } else {
    const messageId = (target as { messageId?: unknown } | undefined)?.messageId;
    if (typeof messageId !== 'string' || !UUID.test(messageId))
      throw new OutboxValidationError('message.messageId', 'must be a message id (UUID)');
    subject = { m: messageId.toLowerCase() };
  }
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
    ...subject,
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
  let payload: { v?: unknown; m?: unknown; c?: unknown; exp?: unknown; by?: unknown };
  try {
    payload = JSON.parse(Buffer.from(body, 'base64url').toString('utf8')) as typeof payload;
  } catch {
    throw new ApprovalTokenError('invalid', 'malformed approval token');
  }
  const message = typeof payload.m === 'string' && UUID.test(payload.m);
  const call = typeof payload.c === 'string' && /^[0-9]{1,19}$/.test(payload.c);
  if (
    payload.v !== 1 ||
    message === call ||
    typeof payload.exp !== 'number' ||
    (payload.by !== undefined && typeof payload.by !== 'string')
  )
    throw new ApprovalTokenError('invalid', 'malformed approval token');
  if (payload.exp <= now) throw new ApprovalTokenError('expired', 'this approval link has expired');
  const by = payload.by as string | undefined;
  const expiresAt = new Date(payload.exp);
  return message
    ? { messageId: payload.m as string, expiresAt, by }
    : { approvalId: `call-${payload.c as string}`, expiresAt, by };
}
