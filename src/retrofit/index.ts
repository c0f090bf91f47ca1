/**
 * Retrofit tools (SPEC §4.10): backfill from a SELECT. Shadow mode lives in the writer
 * (`shadow: true`) and `readShadowComparison`; the cut-off pattern is documented in
 * docs/operations.md.
 * @packageDocumentation
 */
export {
  backfill,
  BACKFILL_HEADER,
  type BackfillOptions,
  type BackfillProgress,
  type BackfillResult,
} from './backfill.js';
