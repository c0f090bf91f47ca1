import type { ClientConfig } from 'pg';
import { expect, test } from 'vitest';
import type { PgConnectionConfig } from '../../../src/cdc/index.js';

// PgConnectionConfig stands in for pg's ClientConfig in the published types (no @types/pg
// needed there): `tsc --noEmit` (npm run lint) fails here when either stops fitting the other.
const fromClientConfig = (config: ClientConfig): PgConnectionConfig => config;
const toClientConfig = (config: PgConnectionConfig): ClientConfig => config;

test('a pg ClientConfig is a PgConnectionConfig and back', () => {
  const config = { connectionString: 'postgres://localhost/db', application_name: 'cdc' };
  expect(toClientConfig(fromClientConfig(config))).toBe(config);
});
