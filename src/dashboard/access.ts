import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { isIP } from 'node:net';

/** True for 127.0.0.0/8, ::1 and `localhost`: addresses only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  const bare = host.replace(/^\[|\]$/g, '');
  if (bare === 'localhost' || bare === '::1') return true;
  return isIP(bare) === 4 && bare.startsWith('127.');
}

/** Constant-time comparison of a presented token with the configured one. */
export function tokenMatches(presented: string | undefined, expected: string): boolean {
  if (presented === undefined) return false;
  const a = Buffer.from(presented);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The token of a request: `Authorization: Bearer <token>`. */
export function presentedToken(request: IncomingMessage): string | undefined {
  const header = request.headers.authorization;
  const match = header === undefined ? null : /^Bearer (.+)$/.exec(header);
  return match?.[1];
}

/**
 * Checks a state-changing request comes from the dashboard's own page:
 * - the `Host` header names a loopback address when the server is bound to one, so a DNS
 *   rebinding page (evil.example resolving to 127.0.0.1) is refused;
 * - an `Origin`, when the browser sends one, is the server's own;
 * - the body is declared JSON, which a cross-site form cannot send without a CORS preflight
 *   (which this server never grants).
 * Returns the reason for refusing, or undefined.
 */
export function refuseCrossSite(
  request: IncomingMessage,
  boundToLoopback: boolean,
): string | undefined {
  const host = request.headers.host ?? '';
  if (boundToLoopback && !isLoopbackHost(host.replace(/:\d+$/, '')))
    return `Host "${host}" is not a loopback address`;
  const origin = request.headers.origin;
  if (origin !== undefined && origin !== `http://${host}`)
    return `Origin "${origin}" is not this dashboard`;
  if (!/^application\/json\b/.test(request.headers['content-type'] ?? ''))
    return 'Content-Type must be application/json';
  return undefined;
}
