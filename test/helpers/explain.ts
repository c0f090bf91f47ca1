import type pg from 'pg';
import type { SqlExecutor } from '../../src/index.js';

/** One node of `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`, the fields the tests read. */
export interface PlanNode {
  'Relation Name'?: string;
  'Actual Rows'?: number;
  'Actual Loops'?: number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

/** Rows every scan of `relation` produced or threw away, over all its loops. */
export function rowsRead(plan: PlanNode, relation = 'outbox'): number {
  return nodes(plan)
    .filter((n) => n['Relation Name'] === relation)
    .reduce(
      (sum, n) =>
        sum +
        ((n['Actual Rows'] ?? 0) +
          (n['Rows Removed by Filter'] ?? 0) +
          (n['Rows Removed by Index Recheck'] ?? 0)) *
          (n['Actual Loops'] ?? 1),
      0,
    );
}

/** What {@link explainingExecutor} saw of one statement. */
export interface StatementSample {
  label: string;
  /** Rows of the outbox the statement read (EXPLAIN ANALYZE), when it was explained. */
  rowsRead?: number;
  /** Length of the longest array among its parameters. */
  longestArray: number;
}

/**
 * An executor on `pool` that records every statement it runs (the longest array parameter) and
 * runs the statements `explain` labels under `EXPLAIN (ANALYZE, BUFFERS)` first, in a transaction
 * of their own that is rolled back, to count the outbox rows each one reads. The statement itself
 * then runs as usual. Meant for tests that assert a statement's work stays bounded while the
 * system under test runs normally.
 */
export function explainingExecutor(
  pool: pg.Pool,
  explain: (text: string) => string | undefined,
): { executor: SqlExecutor; samples: StatementSample[] } {
  const samples: StatementSample[] = [];
  const executor: SqlExecutor = {
    query: async <Row>(text: string, values: readonly unknown[] = []) => {
      const label = explain(text);
      const longestArray = Math.max(0, ...values.map((v) => (Array.isArray(v) ? v.length : 0)));
      const sample: StatementSample = { label: label ?? 'other', longestArray };
      if (label) {
        const client = await pool.connect();
        try {
          await client.query('BEGIN');
          const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
            `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
            [...values],
          );
          sample.rowsRead = rowsRead(rows[0]!['QUERY PLAN'][0].Plan);
        } finally {
          await client.query('ROLLBACK').catch(() => undefined);
          client.release();
        }
      }
      samples.push(sample);
      return (await pool.query(text, [...values])) as unknown as { rows: Row[] };
    },
  };
  return { executor, samples };
}
