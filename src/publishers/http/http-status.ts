/**
 * How a webhook's HTTP status maps to an outcome. Retryable: 408 (the receiver timed out), 429
 * (rate limited) and every 5xx — the receiver may succeed later. Permanent: the other 4xx, since
 * the same request will be refused again, and 3xx, because redirects are not followed (a POST
 * redirected by `fetch` can silently turn into a GET): point the publisher at the final URL.
 */
export function classifyStatus(status: number): 'published' | 'retryable' | 'permanent' {
  if (status >= 200 && status < 300) return 'published';
  if (status === 408 || status === 429 || status >= 500) return 'retryable';
  return 'permanent';
}

/**
 * Parses a `Retry-After` value — delay-seconds or an HTTP date — into milliseconds from `now`.
 * Returns undefined when absent or unparseable (then the dispatcher's backoff decides alone); a
 * date in the past gives 0.
 */
export function parseRetryAfter(
  value: string | null | undefined,
  now = Date.now(),
): number | undefined {
  if (value === null || value === undefined) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // Only accept things that look like an HTTP date: Date.parse also takes "1.5" or "2024".
  if (!/^[A-Za-z]{3},\s/.test(text)) return undefined;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}
