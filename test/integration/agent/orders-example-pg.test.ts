import { describe } from 'vitest';
import { createTestDatabase } from '../../helpers/database.js';
import { ordersScenarios } from './orders-scenarios.js';

describe('orders example on Postgres (Kysely + pg Pool)', () => {
  ordersScenarios(async () => {
    const db = await createTestDatabase();
    return { database: { pool: db.pool }, close: () => db.drop() };
  });
});
