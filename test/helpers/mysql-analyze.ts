import type mysql from 'mysql2/promise';

/** What one statement read, from MariaDB's `ANALYZE FORMAT=JSON` (it runs the statement). */
export interface AnalyzedCost {
  /** Rows the tables handed to the executor, over every loop of every table access. */
  rowsRead: number;
  /**
   * InnoDB pages the statement touched (`r_engine_stats.pages_accessed`, MariaDB 10.9+): counts
   * index records walked that are not rows any more — delete-marked entries a held snapshot keeps
   * from purge — which `r_rows` does not.
   */
  pages: number;
  /** The plan's table accesses, for a failure message. */
  tables: { table: string; key?: string; rows: number; loops: number; pages: number }[];
}

interface TableNode {
  table_name?: string;
  key?: string;
  r_rows?: number;
  r_loops?: number;
  r_engine_stats?: { pages_accessed?: number };
}

/**
 * Runs `sql` under `ANALYZE FORMAT=JSON` on `connection` and sums what its table accesses read.
 * MariaDB only (MySQL 8's EXPLAIN ANALYZE prints a tree instead). The statement really runs: a
 * locking read takes its locks, so call it inside a transaction you roll back.
 */
export async function analyzeStatement(
  connection: mysql.Connection,
  sql: string,
  values: unknown[] = [],
): Promise<AnalyzedCost> {
  const [rows] = await connection.query(`ANALYZE FORMAT=JSON ${sql}`, values);
  const text = (rows as Record<string, string>[])[0]?.ANALYZE;
  if (text === undefined) throw new Error('ANALYZE FORMAT=JSON returned no plan (MariaDB 10.9+?)');
  const tables: AnalyzedCost['tables'] = [];
  const walk = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) walk(item);
      return;
    }
    if (node === null || typeof node !== 'object') return;
    const record = node as Record<string, unknown>;
    const table = record.table as TableNode | undefined;
    if (table?.table_name !== undefined) {
      const loops = table.r_loops ?? 0;
      tables.push({
        table: table.table_name,
        ...(table.key === undefined ? {} : { key: table.key }),
        // r_rows is the average per loop.
        rows: Math.round((table.r_rows ?? 0) * loops),
        loops,
        pages: table.r_engine_stats?.pages_accessed ?? 0,
      });
    }
    for (const value of Object.values(record)) walk(value);
  };
  walk(JSON.parse(text));
  return {
    rowsRead: tables.reduce((sum, t) => sum + t.rows, 0),
    pages: tables.reduce((sum, t) => sum + t.pages, 0),
    tables,
  };
}
