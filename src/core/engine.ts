import { OutboxValidationError } from './errors.js';

/**
 * Which engine's tables an API call is about: `'claims'` (the `outbox` table, `createDispatcher`)
 * or `'lanes'` (migration 024: `createOutbox({ engine: 'lanes' })`, `createLaneDispatcher`).
 */
export type Engine = 'claims' | 'lanes';

/**
 * An `engine` option checked: undefined is `'claims'` here (API calls read the schema's record
 * first, admin/database-engine.ts `engineFor`); anything else than the two
 * names is refused with the error every API gives for it (nothing is read or written).
 */
export function resolveEngine(engine: unknown): Engine {
  if (engine === undefined || engine === 'claims') return 'claims';
  if (engine === 'lanes') return 'lanes';
  throw new OutboxValidationError(
    'engine',
    `must be 'claims' or 'lanes', got ${JSON.stringify(engine)}`,
  );
}
