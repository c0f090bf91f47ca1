import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * Standard Webhooks (standardwebhooks.com), symmetric scheme only: the three `webhook-*` headers,
 * `v1` signatures (base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`) and `whsec_` secrets. Shared
 * by the HTTP publisher (signs) and the consumer's HTTP receiver (verifies). Built on node:crypto
 * so that neither side depends on an SDK; the tests check both against the `standardwebhooks`
 * package, the spec's reference implementation.
 */

/** Prefix of a Standard Webhooks symmetric secret: `whsec_<base64 key>`. */
export const WEBHOOK_SECRET_PREFIX = 'whsec_';
/** The spec's key size: "at least 24 bytes (192 bits), 512 bits maximum". */
const MIN_KEY_BYTES = 24;
const MAX_KEY_BYTES = 64;
/** How far a `webhook-timestamp` may be from now before the receiver refuses it (5 minutes). */
export const DEFAULT_WEBHOOK_TOLERANCE_MS = 5 * 60_000;

/** Ways to make a valid secret, quoted by every error about one. */
const HOW_TO_MAKE_ONE =
  "make one with: node -e \"console.log('whsec_' + require('node:crypto').randomBytes(32).toString('base64'))\"";

/**
 * A signing secret that is not `whsec_<base64 of 24–64 bytes>`. The message names the secret by
 * its position (`label`), never by its value: it goes to logs and stderr.
 */
export class WebhookSecretError extends TypeError {
  constructor(message: string) {
    super(message);
    this.name = 'WebhookSecretError';
  }
}

/**
 * Decodes a `whsec_…` secret into its HMAC key, or throws a {@link WebhookSecretError} saying what
 * is wrong with it. Strict on purpose: a typo must stop the start-up, not sign with a key the
 * receiver does not have (every request would then be refused).
 *
 * @param label how the error names the secret, e.g. `signingSecrets[1]`.
 */
export function parseWebhookSecret(secret: string, label = 'signing secret'): Buffer {
  if (typeof secret !== 'string') throw new WebhookSecretError(`${label} must be a string`);
  if (!secret.startsWith(WEBHOOK_SECRET_PREFIX))
    throw new WebhookSecretError(
      `${label} does not start with "${WEBHOOK_SECRET_PREFIX}": Standard Webhooks secrets are whsec_<base64 of 24-64 random bytes> (${HOW_TO_MAKE_ONE})`,
    );
  const encoded = secret.slice(WEBHOOK_SECRET_PREFIX.length);
  // Buffer.from(…, 'base64') skips characters it does not know; a round trip catches them.
  const key = Buffer.from(encoded, 'base64');
  if (
    !/^[A-Za-z0-9+/]+={0,2}$/.test(encoded) ||
    key.toString('base64').replace(/=+$/, '') !== encoded.replace(/=+$/, '')
  )
    throw new WebhookSecretError(
      `${label} is not standard base64 after "${WEBHOOK_SECRET_PREFIX}" (only A-Z a-z 0-9 + / and = padding; check for a cut-off or URL-safe copy)`,
    );
  if (key.length < MIN_KEY_BYTES || key.length > MAX_KEY_BYTES)
    throw new WebhookSecretError(
      `${label} holds a ${key.length}-byte key; Standard Webhooks keys are ${MIN_KEY_BYTES} to ${MAX_KEY_BYTES} random bytes (${HOW_TO_MAKE_ONE})`,
    );
  return key;
}

/**
 * Decodes a list of secrets (rotation: the current one and those still accepted), naming a bad one
 * as `${listLabel}[i]`. An empty list is an error: it would silently mean "unsigned".
 */
export function parseWebhookSecrets(secrets: readonly string[], listLabel: string): Buffer[] {
  if (!Array.isArray(secrets))
    throw new WebhookSecretError(`${listLabel} must be an array of whsec_ secrets, e.g. [secret]`);
  if (secrets.length === 0)
    throw new WebhookSecretError(
      `${listLabel} is empty: give at least one whsec_ secret, or leave the option out for unsigned webhooks`,
    );
  return secrets.map((secret, i) => parseWebhookSecret(secret, `${listLabel}[${i}]`));
}

/**
 * The `webhook-signature` value for one request: `v1,<base64 HMAC-SHA256>` per key, space
 * separated, so a receiver that knows any one of the keys can verify it (zero-downtime rotation).
 * `body` must be exactly the bytes sent.
 */
export function signWebhook(
  keys: readonly Buffer[],
  id: string,
  timestampSeconds: number,
  body: string | Buffer,
): string {
  return keys.map((key) => `v1,${hmac(key, id, String(timestampSeconds), body)}`).join(' ');
}

/** The three headers a receiver verifies, as received (undefined when absent). */
export interface WebhookSignatureHeaders {
  id: string | undefined;
  timestamp: string | undefined;
  signature: string | undefined;
}

/** Result of {@link verifyWebhook}: the verified message id, or why the request is refused. */
export type WebhookVerification =
  | { ok: true; id: string }
  | {
      ok: false;
      /** For the 401 body and logs; never contains a secret or an expected signature. */
      reason: string;
    };

/**
 * Checks a request against the Standard Webhooks rules: all three headers present, timestamp in
 * whole Unix seconds within `toleranceMs` of `nowMs` either way (replay protection), and at least
 * one `v1` signature matching one of `keys`, compared in constant time. The timestamp is checked
 * first only because it is cheaper; it reveals nothing about the keys.
 */
export function verifyWebhook(
  keys: readonly Buffer[],
  headers: WebhookSignatureHeaders,
  body: Buffer,
  toleranceMs = DEFAULT_WEBHOOK_TOLERANCE_MS,
  nowMs = Date.now(),
): WebhookVerification {
  const { id, timestamp, signature } = headers;
  if (!id || !timestamp || !signature)
    return {
      ok: false,
      reason: 'missing webhook-id, webhook-timestamp or webhook-signature header',
    };
  if (!/^\d{1,12}$/.test(timestamp))
    return { ok: false, reason: 'webhook-timestamp is not a Unix time in seconds' };
  const skewMs = nowMs - Number(timestamp) * 1000;
  if (Math.abs(skewMs) > toleranceMs) {
    const seconds = Math.round(Math.abs(skewMs) / 1000);
    return {
      ok: false,
      reason: `webhook-timestamp is ${seconds} s ${skewMs > 0 ? 'old' : 'in the future'} (tolerance ${toleranceMs / 1000} s): replayed, or a clock is off`,
    };
  }
  const offered = signature
    .split(' ')
    .filter((entry) => entry.startsWith('v1,'))
    .map((entry) => Buffer.from(entry.slice(3)));
  for (const key of keys) {
    const expected = Buffer.from(hmac(key, id, timestamp, body));
    for (const candidate of offered) {
      // timingSafeEqual needs equal lengths; every v1 signature is 44 base64 characters, so the
      // length says nothing about the key.
      if (candidate.length === expected.length && timingSafeEqual(candidate, expected))
        return { ok: true, id };
    }
  }
  return { ok: false, reason: 'no webhook-signature matches a signing secret of this receiver' };
}

function hmac(key: Buffer, id: string, timestamp: string, body: string | Buffer): string {
  return createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64');
}
