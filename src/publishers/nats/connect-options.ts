import type { NatsModuleLike } from './nats-client.js';

/** What `nats.connect` is given for a `--publisher nats://…` URL (one server or a list). */
export type NatsConnectOptions = Parameters<NatsModuleLike['connect']>[0];

/**
 * A `nats://` URL the publisher cannot connect with: a usage mistake (`outbox dispatch` exits 2
 * on it), not a broker outage.
 */
export class NatsUrlError extends TypeError {
  override name = 'NatsUrlError';
}

const SCHEMES = new Set(['nats:', 'tls:', 'ws:', 'wss:']);

/**
 * `nats://user:pass@host:4222` → connect options; nats.js wants credentials apart.
 *
 * A cluster is named the NATS client's own way, a comma-separated list of server URLs
 * (`nats://h:4301,nats://h:4302,nats://h:4303`): the client connects to one of them (in random
 * order, to spread the dispatchers over the nodes), skipping those that are down, and fails over
 * to the others — and to the nodes the cluster announces — when its node goes away. Credentials
 * may be written on any entry (the client has one set for all); two different sets are refused.
 * An entry without a scheme takes the first entry's (`nats://h:4301,h:4302`).
 *
 * @throws NatsUrlError when an entry is not a URL, or the entries disagree on credentials.
 */
export function connectOptions(url: string): NatsConnectOptions {
  const entries = url.split(',').map((entry) => entry.trim());
  const firstScheme = /^([a-z][a-z0-9+.-]*:)\/\//i.exec(entries[0] ?? '')?.[1] ?? 'nats:';
  const servers: string[] = [];
  let credentials: { user?: string; pass?: string; token?: string; from: string } | undefined;
  for (const entry of entries) {
    if (entry === '')
      throw new NatsUrlError(
        `NATS URL "${shown(url)}" has an empty entry: separate server URLs with single commas, e.g. nats://h:4301,nats://h:4302`,
      );
    const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(entry) ? entry : `${firstScheme}//${entry}`;
    let parsed: URL;
    try {
      parsed = new URL(withScheme);
    } catch {
      throw new NatsUrlError(
        `NATS URL entry "${shown(entry)}" is not a URL: write each server as nats://host:port, several separated by commas`,
      );
    }
    if (!SCHEMES.has(parsed.protocol) || parsed.hostname === '')
      throw new NatsUrlError(
        `NATS URL entry "${shown(entry)}" is not a NATS server: write nats://host:port (or tls://, ws://, wss://)`,
      );
    const found = entryCredentials(parsed);
    if (found) {
      if (credentials && !sameCredentials(credentials, found))
        throw new NatsUrlError(
          `NATS URL entries ${credentials.from} and ${parsed.host} carry different credentials: the client logs in to every server of the list with one set, so write it once`,
        );
      credentials ??= { ...found, from: parsed.host };
    }
    servers.push(serverOf(parsed));
  }
  const options: NatsConnectOptions = {
    servers: servers.length === 1 ? servers[0]! : servers,
    name: 'agent-outbox',
  };
  if (credentials?.user !== undefined) {
    options.user = credentials.user;
    options.pass = credentials.pass ?? '';
  } else if (credentials?.token !== undefined) {
    options.token = credentials.token;
  }
  return options;
}

/** `host:port` for plain NATS (the client adds its scheme); the whole URL, minus login, else. */
function serverOf(parsed: URL): string {
  if (parsed.protocol === 'nats:') return `${parsed.hostname}:${parsed.port || '4222'}`;
  const bare = new URL(parsed.href);
  bare.username = '';
  bare.password = '';
  return bare.href.replace(/\/$/, '');
}

function entryCredentials(
  parsed: URL,
): { user?: string; pass?: string; token?: string } | undefined {
  if (parsed.username && parsed.password)
    return {
      user: decodeURIComponent(parsed.username),
      pass: decodeURIComponent(parsed.password),
    };
  if (parsed.username) return { token: decodeURIComponent(parsed.username) };
  return undefined;
}

function sameCredentials(
  a: { user?: string; pass?: string; token?: string },
  b: { user?: string; pass?: string; token?: string },
): boolean {
  return a.user === b.user && a.pass === b.pass && a.token === b.token;
}

/** An entry as it may appear in an error: without its password or token. */
function shown(text: string): string {
  return text.replace(/\/\/[^@/,]*@/g, '//[REDACTED]@');
}
