import { PUBLISHER_URL_SCHEMES } from '../../publishers/from-url.js';
import {
  createPublisherFromConfig,
  loadPublisherConfig,
  PublisherConfigError,
} from '../../publishers/publisher-config.js';
import { WebhookSecretError } from '../../publishers/http/standard-webhooks.js';
import { connectOptions, NatsUrlError } from '../../publishers/nats/connect-options.js';
import { redactUrl } from '../database.js';
import { UsageError } from '../usage-error.js';

/**
 * Loads a routing config; its mistakes are the command line's (exit 2), not runtime failures.
 * `webhookSecrets` (from the environment or --webhook-secret-file) sign its http(s) routes.
 */
export async function publisherFromConfig(path: string, webhookSecrets: string[] | undefined) {
  try {
    const config = await loadPublisherConfig(path);
    return await createPublisherFromConfig(
      webhookSecrets
        ? { ...config, options: { ...config.options, httpSigningSecrets: webhookSecrets } }
        : config,
    );
  } catch (error) {
    if (
      error instanceof PublisherConfigError ||
      error instanceof WebhookSecretError ||
      error instanceof NatsUrlError
    )
      throw new UsageError(error.message);
    if ((error as NodeJS.ErrnoException).code === 'ENOENT')
      throw new UsageError(`--config ${path}: no such file`);
    throw error;
  }
}

/**
 * An unknown `--publisher` scheme, or a `nats://` server list that cannot be read, is a wrong
 * command line (exit 2), found before connecting to anything; createPublisherFromUrl would
 * refuse it later as a runtime failure (exit 1).
 */
export function checkPublisherScheme(url: string): void {
  const scheme = /^([a-z][a-z0-9+.-]*):/i.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'nats') {
    try {
      connectOptions(url);
    } catch (error) {
      if (error instanceof NatsUrlError) throw new UsageError(`--publisher: ${error.message}`);
      throw error;
    }
  }
  if (scheme !== undefined && (PUBLISHER_URL_SCHEMES as readonly string[]).includes(scheme)) return;
  throw new UsageError(
    `--publisher ${scheme === undefined ? `"${url}" has no scheme` : `scheme "${scheme}://" is not supported`}: use one of ${PUBLISHER_URL_SCHEMES.map((s) => `${s}://`).join(', ')}`,
  );
}

/**
 * `--publisher` as the startup line shows it: each entry of a server list
 * (`nats://h:4301,nats://u:pw@h:4302`) without its password, as `redactUrl` shows one URL, which
 * cannot read a list.
 */
export function shownPublisher(url: string): string {
  return url
    .split(',')
    .map((entry) => redactUrl(entry.trim()))
    .join(',');
}
