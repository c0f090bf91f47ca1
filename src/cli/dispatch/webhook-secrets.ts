import { readFile } from 'node:fs/promises';
import { parseWebhookSecret, WebhookSecretError } from '../../publishers/http/standard-webhooks.js';
import { UsageError } from '../usage-error.js';

/**
 * Where `outbox dispatch` gets its Standard Webhooks signing secrets: the environment or a file,
 * never a command-line value (SPEC §6: argv shows in `ps` and in shell history).
 */

/** Environment variable holding the signing secrets, space-separated (new one first, then old). */
export const WEBHOOK_SECRET_ENV = 'OUTBOX_WEBHOOK_SECRET';

/**
 * Refuses `--webhook-secret …` with the two places a secret may come from, before `parseArgs`
 * turns it into a bare "unknown option".
 */
export function refuseSecretOnCommandLine(argv: readonly string[]): void {
  if (argv.some((arg) => arg === '--webhook-secret' || arg.startsWith('--webhook-secret=')))
    throw new UsageError(
      `signing secrets are never taken as command-line values (they would show in ps): set ${WEBHOOK_SECRET_ENV}="whsec_…" or use --webhook-secret-file PATH`,
    );
}

/** What {@link loadWebhookSecrets} reads. */
export interface WebhookSecretSources {
  /** `--publisher` URL, or undefined with `--config` (whose http(s) routes are all signed). */
  publisher: string | undefined;
  /** Value of {@link WEBHOOK_SECRET_ENV}, undefined when unset. */
  env: string | undefined;
  /** `--webhook-secret-file` path, undefined when not given. */
  file: string | undefined;
}

/**
 * The secrets to sign http(s) publishes with, or undefined for unsigned requests. Every secret is
 * checked here, so a malformed one is a usage error (exit 2) before anything is published; errors
 * name a secret by its position, never by its value.
 */
export async function loadWebhookSecrets(
  sources: WebhookSecretSources,
): Promise<string[] | undefined> {
  const http = sources.publisher === undefined || /^https?:/i.test(sources.publisher);
  if (!http) {
    if (sources.file !== undefined)
      throw new UsageError('--webhook-secret-file applies to http(s):// publishers only');
    // The variable may be set for every dispatcher of a host; a broker dispatcher has no use for it.
    return undefined;
  }
  if (sources.env !== undefined && sources.file !== undefined)
    throw new UsageError(
      `give ${WEBHOOK_SECRET_ENV} or --webhook-secret-file, not both (which one would be current?)`,
    );
  if (sources.env !== undefined) {
    const secrets = sources.env.split(/\s+/).filter(Boolean);
    // Set but empty is a deployment whose secret did not arrive: never fall back to unsigned.
    if (secrets.length === 0)
      throw new UsageError(
        `${WEBHOOK_SECRET_ENV} is set but empty: put the whsec_ secret(s) in it, space-separated, or unset it to send unsigned webhooks`,
      );
    secrets.forEach((secret, i) =>
      check(
        secret,
        secrets.length === 1
          ? WEBHOOK_SECRET_ENV
          : `${WEBHOOK_SECRET_ENV} secret ${i + 1} of ${secrets.length}`,
      ),
    );
    return secrets;
  }
  if (sources.file !== undefined) {
    const path = sources.file;
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new UsageError(
        `--webhook-secret-file ${path}: ${code === 'ENOENT' ? 'no such file' : `cannot read it (${code ?? (error as Error).message})`}`,
      );
    }
    const secrets: string[] = [];
    text.split(/\r?\n/).forEach((raw, i) => {
      const line = raw.trim();
      // Blank lines and # comments let the file say which secret is being retired.
      if (line === '' || line.startsWith('#')) return;
      check(line, `--webhook-secret-file ${path} line ${i + 1}`);
      secrets.push(line);
    });
    if (secrets.length === 0)
      throw new UsageError(
        `--webhook-secret-file ${path} holds no secret: put one whsec_ secret per line`,
      );
    return secrets;
  }
  return undefined;
}

function check(secret: string, label: string): void {
  try {
    parseWebhookSecret(secret, label);
  } catch (error) {
    if (error instanceof WebhookSecretError) throw new UsageError(error.message);
    throw error;
  }
}
