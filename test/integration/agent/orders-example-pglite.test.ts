import { PGlite } from '@electric-sql/pglite';
import { describe } from 'vitest';
import { ordersScenarios } from './orders-scenarios.js';

describe('orders example on PGlite (Kysely + PgliteDialect; a new schema: the lanes engine)', () => {
  ordersScenarios(async () => {
    const db = await PGlite.create();
    return { database: { pglite: db }, close: () => db.close() };
  });
});
