/**
 * Makes an error text safe to store in `last_error` and to log: known secret shapes are replaced
 * and the text is truncated. Patterns cover what publishers' errors actually echo back: URLs with
 * credentials, bearer/basic tokens, API keys (Anthropic, OpenAI, Stripe, AWS, GitHub, Slack),
 * webhook signing secrets (`whsec_…`), `password=...` style pairs and JWTs.
 */
const PATTERNS: readonly [RegExp, string][] = [
  [/([a-z][a-z0-9+.-]*:\/\/)([^:/?#@\s]+):([^@/?#\s]+)@/gi, '$1$2:[REDACTED]@'],
  [/\b(bearer|basic)\s+[a-z0-9._~+/=-]{8,}/gi, '$1 [REDACTED]'],
  [/\bsk-(?:ant-)?[a-z0-9_-]{10,}/gi, '[REDACTED]'],
  [/\b(?:sk|rk|pk)_(?:live|test)_[a-z0-9]{8,}/gi, '[REDACTED]'],
  [/\bAKIA[0-9A-Z]{16}\b/g, '[REDACTED]'],
  [/\bgh[pousr]_[A-Za-z0-9]{20,}/g, '[REDACTED]'],
  [/\bxox[abprs]-[A-Za-z0-9-]{10,}/g, '[REDACTED]'],
  // Standard Webhooks signing secrets (whsec_) and asymmetric secret keys (whsk_).
  [/\bwh(?:sec|sk)_[A-Za-z0-9+/]{8,}={0,2}/g, '[REDACTED]'],
  [/\beyJ[a-z0-9_-]{5,}\.[a-z0-9_-]{5,}\.[a-z0-9_-]{5,}/gi, '[REDACTED]'],
  [
    /\b(password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|authorization)("?\s*[=:]\s*)("?)[^\s"&,;]+/gi,
    '$1$2$3[REDACTED]',
  ],
];

/** Default maximum length of a stored error text. */
export const MAX_ERROR_LENGTH = 2000;

export function redactSecrets(text: string, maxLength = MAX_ERROR_LENGTH): string {
  let result = text;
  for (const [pattern, replacement] of PATTERNS) result = result.replace(pattern, replacement);
  // eslint-disable-next-line no-control-regex
  result = result.replace(/\u0000/g, '');
  if (result.length > maxLength) result = `${result.slice(0, maxLength - 13)}… [truncated]`;
  return result;
}
