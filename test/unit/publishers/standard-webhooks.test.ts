import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { redactSecrets } from '../../../src/core/redact.js';
import {
  parseWebhookSecret,
  parseWebhookSecrets,
  signWebhook,
  verifyWebhook,
  WebhookSecretError,
} from '../../../src/publishers/http/standard-webhooks.js';

/** The secret and vector of the reference libraries' own tests (svix / standard-webhooks). */
const SPEC_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const SPEC_ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const SPEC_TIMESTAMP = 1614265330;
const SPEC_BODY = '{"test": 2432232314}';
const SPEC_SIGNATURE = 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=';

const secretOf = (bytes: number) => `whsec_${randomBytes(bytes).toString('base64')}`;

describe('parseWebhookSecret', () => {
  it('accepts whsec_ secrets of 24 to 64 bytes, with or without padding', () => {
    expect(parseWebhookSecret(SPEC_SECRET)).toHaveLength(24);
    expect(parseWebhookSecret(secretOf(32))).toHaveLength(32);
    expect(parseWebhookSecret(secretOf(64))).toHaveLength(64);
    const padded = secretOf(32);
    expect(padded.endsWith('=')).toBe(true);
    expect(parseWebhookSecret(padded.replace(/=+$/, ''))).toEqual(parseWebhookSecret(padded));
  });

  const malformed: [string, string, RegExp][] = [
    ['no prefix', randomBytes(32).toString('base64'), /does not start with "whsec_"/],
    ['wrong prefix', `whsk_${randomBytes(32).toString('base64')}`, /does not start with/],
    ['empty after prefix', 'whsec_', /not standard base64/],
    ['a character outside base64', `${secretOf(32).slice(0, 20)}!${'A'.repeat(23)}`, /base64/],
    ['URL-safe base64', `whsec_${'-_'.repeat(16)}`, /base64/],
    ['inner whitespace', `${secretOf(32).slice(0, 20)} ${secretOf(32).slice(20)}`, /base64/],
    ['16 bytes (spec: at least 24)', secretOf(16), /16-byte key.*24 to 64/],
    ['65 bytes (spec: at most 512 bits)', secretOf(65), /65-byte key/],
  ];
  it.each(malformed)('rejects %s, naming the secret by label only', (_case, secret, reason) => {
    let error: unknown;
    try {
      parseWebhookSecret(secret, 'signingSecrets[1]');
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(WebhookSecretError);
    const message = (error as Error).message;
    expect(message).toMatch(reason);
    expect(message).toMatch(/^signingSecrets\[1\] /);
    const body = secret.replace(/^wh(sec|sk)_/, '');
    if (body.length >= 8) expect(message).not.toContain(body);
  });

  it('rejects an empty list (it would mean unsigned) and a bare string', () => {
    expect(() => parseWebhookSecrets([], 'signingSecrets')).toThrow(/is empty/);
    expect(() => parseWebhookSecrets(SPEC_SECRET as unknown as string[], 'signingSecrets')).toThrow(
      /must be an array/,
    );
    expect(() => parseWebhookSecrets([SPEC_SECRET, 'nope'], 'signingSecrets')).toThrow(
      /^signingSecrets\[1\] does not start/,
    );
  });
});

describe('signWebhook', () => {
  it('reproduces the reference test vector', () => {
    const key = parseWebhookSecret(SPEC_SECRET);
    expect(signWebhook([key], SPEC_ID, SPEC_TIMESTAMP, SPEC_BODY)).toBe(SPEC_SIGNATURE);
    expect(signWebhook([key], SPEC_ID, SPEC_TIMESTAMP, Buffer.from(SPEC_BODY))).toBe(
      SPEC_SIGNATURE,
    );
  });

  it('matches the reference library on non-ASCII bodies, one signature per key', () => {
    const secrets = [secretOf(32), secretOf(24)];
    const body = JSON.stringify({ text: 'grüße ✓ 日本語 🎉 e\u0301 \u2028' });
    const header = signWebhook(
      secrets.map((s) => parseWebhookSecret(s)),
      'msg_1',
      1_700_000_000,
      body,
    );
    expect(header.split(' ')).toEqual(
      secrets.map((s) => new Webhook(s).sign('msg_1', new Date(1_700_000_000_000), body)),
    );
  });
});

describe('verifyWebhook', () => {
  const key = parseWebhookSecret(SPEC_SECRET);
  const now = SPEC_TIMESTAMP * 1000;
  const headers = { id: SPEC_ID, timestamp: String(SPEC_TIMESTAMP), signature: SPEC_SIGNATURE };
  const body = Buffer.from(SPEC_BODY);

  it('accepts the reference vector, also among other signatures and schemes', () => {
    expect(verifyWebhook([key], headers, body, 300_000, now)).toEqual({ ok: true, id: SPEC_ID });
    const crowded = `v1a,${'A'.repeat(88)} v1,${'B'.repeat(44)} ${SPEC_SIGNATURE} v2,x`;
    expect(verifyWebhook([key], { ...headers, signature: crowded }, body, 300_000, now).ok).toBe(
      true,
    );
    // Any of the receiver's keys will do (rotation).
    expect(
      verifyWebhook([parseWebhookSecret(secretOf(32)), key], headers, body, 300_000, now).ok,
    ).toBe(true);
  });

  it('refuses tampering with the body, the id or the timestamp', () => {
    const refuse = (h: typeof headers, b = body) => verifyWebhook([key], h, b, 300_000, now);
    expect(refuse(headers, Buffer.from(SPEC_BODY.replace('2432', '2433')))).toMatchObject({
      ok: false,
      reason: /no webhook-signature matches/,
    });
    expect(refuse({ ...headers, id: `${SPEC_ID}x` }).ok).toBe(false);
    expect(refuse({ ...headers, timestamp: String(SPEC_TIMESTAMP + 1) }).ok).toBe(false);
    // The same bytes under another scheme's label are not a v1 signature.
    expect(refuse({ ...headers, signature: SPEC_SIGNATURE.replace('v1,', 'v1a,') }).ok).toBe(false);
    expect(refuse({ ...headers, signature: 'v1,' }).ok).toBe(false);
  });

  it('refuses missing headers and timestamps that are not whole seconds', () => {
    for (const missing of ['id', 'timestamp', 'signature'] as const) {
      expect(verifyWebhook([key], { ...headers, [missing]: undefined }, body)).toMatchObject({
        ok: false,
        reason: /missing webhook-id, webhook-timestamp or webhook-signature/,
      });
    }
    for (const timestamp of ['1614265330.5', '1.6e9', '-1614265330', ' 1614265330', 'now']) {
      expect(verifyWebhook([key], { ...headers, timestamp }, body, 300_000, now)).toMatchObject({
        ok: false,
        reason: /not a Unix time in seconds/,
      });
    }
  });

  it('refuses timestamps beyond the tolerance either way, at the boundary accepts', () => {
    const at = (offsetMs: number, toleranceMs = 300_000) =>
      verifyWebhook([key], headers, body, toleranceMs, now + offsetMs);
    expect(at(300_000).ok).toBe(true);
    expect(at(-300_000).ok).toBe(true);
    expect(at(301_000)).toMatchObject({ ok: false, reason: /301 s old \(tolerance 300 s\)/ });
    expect(at(-301_000)).toMatchObject({ ok: false, reason: /301 s in the future/ });
    expect(at(600_000, 900_000).ok).toBe(true);
  });
});

describe('redactSecrets', () => {
  it('removes whsec_ and whsk_ secrets wherever they appear', () => {
    const secret = secretOf(32);
    const text = `receiver says: expected ${secret}, key=${secret}; ${secret.replace('whsec_', 'whsk_')}`;
    const redacted = redactSecrets(text);
    expect(redacted).not.toContain(secret.slice(6, 30));
    expect(redacted).toContain('[REDACTED]');
  });
});
