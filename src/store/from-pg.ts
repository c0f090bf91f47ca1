import type { SqlExecutor } from './sql-executor.js';

/**
 * The subset of `pg`'s `Client` / `PoolClient` we call. Typed structurally so the core does not
 * import `pg`.
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[] }>;
}

/**
 * Adapts a `pg` client. Pass the client that ran `BEGIN` — not a `Pool`, whose `query` may run on
 * another connection, outside your transaction.
 *
 * @example
 * ```ts
 * const client = await pool.connect();
 * await client.query('BEGIN');
 * await client.query('INSERT INTO orders ...');
 * await outbox.enqueue(fromPg(client), { topic: 'mail.send', aggregateId: 'order:42', payload: {} });
 * await client.query('COMMIT');
 * ```
 */
export function fromPg(client: PgQueryable): SqlExecutor {
  return {
    async query<Row>(text: string, values?: readonly unknown[]) {
      const result = await client.query(text, values ? [...values] : undefined);
      return { rows: result.rows as Row[] };
    },
  };
}
