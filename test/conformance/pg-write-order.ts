import type pg from 'pg';
import { fromPg } from '../../src/store/from-pg.js';
import type { OutboxWriter } from '../../src/writer/create-outbox.js';
import type { StoreUnderTest } from './store-under-test.js';

/**
 * `StoreUnderTest.writeOrder` on Postgres for a given writer (either engine): the order row and
 * the messages in one transaction on a client of `pool`, rolled back when the step after the
 * enqueue fails.
 */
export function pgWriteOrder(pool: pg.Pool, outbox: OutboxWriter): StoreUnderTest['writeOrder'] {
  return async (orderId, messages, options = {}) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('INSERT INTO orders (id) VALUES ($1)', [orderId]);
      const written = await outbox.enqueue(fromPg(client), messages);
      if (options.failAfterEnqueue) throw new Error('the business step failed after the enqueue');
      await client.query('COMMIT');
      return written;
    } catch (error) {
      await client.query('ROLLBACK');
      throw error;
    } finally {
      client.release();
    }
  };
}
