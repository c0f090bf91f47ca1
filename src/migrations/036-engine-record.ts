import { createEngineTableSql, recordClaimsEngineSql } from '../sql/engine.js';
import type { Migration } from './migration.js';

/**
 * `outbox_engine`: the engine a schema's writers, dispatchers and commands follow when they are
 * not told one (sql/engine.ts says why a row). It records the claim engine, the default of every
 * earlier version; `migrate({ engine: 'lanes' })` on a new schema or `outbox engine lanes`
 * records the lanes engine. A writer of an earlier version ignores the table.
 */
export const engineRecord: Migration = {
  version: 36,
  name: 'engine-record',
  up: (s) => [createEngineTableSql(s), recordClaimsEngineSql(s)],
};
