import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  loadWebhookSecrets,
  refuseSecretOnCommandLine,
} from '../../../src/cli/dispatch/webhook-secrets.js';
import { UsageError } from '../../../src/cli/usage-error.js';

const secretOf = (bytes = 32) => `whsec_${randomBytes(bytes).toString('base64')}`;
const http = 'http://127.0.0.1:8080/outbox';
const file = (text: string) => {
  const path = join(mkdtempSync(join(tmpdir(), 'outbox-secrets-')), 'secrets');
  writeFileSync(path, text, { mode: 0o600 });
  return path;
};

/** The UsageError a load throws; fails the test when it resolves. */
async function usageError(promise: Promise<unknown>): Promise<UsageError> {
  const error = await promise.then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(UsageError);
  return error as UsageError;
}

describe('loadWebhookSecrets', () => {
  it('reads OUTBOX_WEBHOOK_SECRET, space-separated, in order', async () => {
    const [a, b] = [secretOf(), secretOf(24)];
    expect(
      await loadWebhookSecrets({ publisher: http, env: ` ${a}  ${b} `, file: undefined }),
    ).toEqual([a, b]);
  });

  it('reads --webhook-secret-file: one per line, CRLF, blank lines and # comments skipped', async () => {
    const [a, b] = [secretOf(), secretOf()];
    const path = file(`# current\r\n${a}\r\n\r\n# retiring 2026-08-01\n  ${b}  \n`);
    expect(await loadWebhookSecrets({ publisher: http, env: undefined, file: path })).toEqual([
      a,
      b,
    ]);
  });

  it('signs nothing when neither is given, and ignores the variable for other brokers', async () => {
    expect(
      await loadWebhookSecrets({ publisher: http, env: undefined, file: undefined }),
    ).toBeUndefined();
    expect(
      await loadWebhookSecrets({ publisher: 'nats://x:4222', env: 'garbage', file: undefined }),
    ).toBeUndefined();
    // --config: its http(s) routes are signed.
    const a = secretOf();
    expect(await loadWebhookSecrets({ publisher: undefined, env: a, file: undefined })).toEqual([
      a,
    ]);
  });

  it('refuses malformed secrets by position, never echoing them', async () => {
    const good = secretOf();
    const bad = randomBytes(32).toString('base64'); // no whsec_ prefix
    const fromEnv = await usageError(
      loadWebhookSecrets({ publisher: http, env: `${good} ${bad}`, file: undefined }),
    );
    expect(fromEnv.message).toMatch(/^OUTBOX_WEBHOOK_SECRET secret 2 of 2 does not start/);
    const path = file(`${good}\nwhsec_${randomBytes(8).toString('base64')}\n`);
    const fromFile = await usageError(
      loadWebhookSecrets({ publisher: http, env: undefined, file: path }),
    );
    expect(fromFile.message).toMatch(/line 2 holds a 8-byte key/);
    for (const error of [fromEnv, fromFile]) {
      expect(error.message).not.toContain(bad);
      expect(error.message).not.toContain(good.slice(6));
    }
  });

  it('refuses an empty variable, an empty or missing file, both sources, a file for a broker', async () => {
    const cases: [Parameters<typeof loadWebhookSecrets>[0], RegExp][] = [
      [{ publisher: http, env: '  ', file: undefined }, /is set but empty/],
      [{ publisher: http, env: undefined, file: file('# nothing yet\n\n') }, /holds no secret/],
      [{ publisher: http, env: undefined, file: '/nonexistent/secrets' }, /no such file/],
      [{ publisher: http, env: secretOf(), file: file(secretOf()) }, /not both/],
      [{ publisher: 'nats://x:4222', env: undefined, file: file(secretOf()) }, /http\(s\)/],
    ];
    for (const [sources, message] of cases) {
      expect((await usageError(loadWebhookSecrets(sources))).message).toMatch(message);
    }
  });
});

describe('refuseSecretOnCommandLine', () => {
  it('refuses --webhook-secret in both forms without repeating the value', () => {
    const secret = secretOf();
    for (const argv of [['--once', '--webhook-secret', secret], ['--webhook-secret=' + secret]]) {
      expect(() => refuseSecretOnCommandLine(argv)).toThrow(UsageError);
      expect(() => refuseSecretOnCommandLine(argv)).toThrow(/OUTBOX_WEBHOOK_SECRET/);
      try {
        refuseSecretOnCommandLine(argv);
      } catch (error) {
        expect((error as Error).message).not.toContain(secret.slice(6));
      }
    }
    expect(() =>
      refuseSecretOnCommandLine(['--webhook-secret-file', '/run/secrets/hook']),
    ).not.toThrow();
  });
});
