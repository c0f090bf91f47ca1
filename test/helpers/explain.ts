import type pg from 'pg';
import {
  PgOutboxStore,
  type ClaimRequest,
  type OutgoingMessage,
  type SqlExecutor,
} from '../../src/index.js';

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

/** A statement that calls one of the outbox's plan-caching functions (migrations 011, 012). */
const CALLS_FUNCTION = /\boutbox_(claim|settle_advance|lane_next|lane_by_ids)\(/;

/**
 * `EXPLAIN (ANALYZE, BUFFERS)` of `text`, run for real on `client` (roll back around it if that
 * matters). A call of `outbox_claim` or `outbox_settle_advance` (migration 011) would show only a
 * function scan, so for those the statement inside the function is read instead: auto_explain,
 * loaded for this session, sends each nested statement's plan to the client as a notice. Those
 * are the plans PL/pgSQL caches, generic ones included.
 */
export async function explainAnalyze(
  client: pg.ClientBase,
  text: string,
  values: readonly unknown[] = [],
): Promise<PlanNode> {
  if (!CALLS_FUNCTION.test(text)) {
    const { rows } = await client.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
      `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${text}`,
      [...values],
    );
    return rows[0]!['QUERY PLAN'][0].Plan;
  }
  const plans = await nestedPlans(client, () => client.query(text, [...values]));
  const nested = plans.filter((p) => p['Query Text'].trim() !== text.trim());
  if (nested.length === 0) throw new Error('expected the plans of the nested statements, got none');
  if (nested.length === 1) return nested[0]!.Plan;
  // outbox_claim (migration 012) runs the lane's statements around the claim (sql/lane.ts): one
  // root over all of them, so what a test counts is everything the call read.
  const sum = (key: 'Shared Hit Blocks' | 'Shared Read Blocks') =>
    nested.reduce((total, p) => total + (p.Plan[key] ?? 0), 0);
  return {
    'Node Type': 'Nested statements',
    'Shared Hit Blocks': sum('Shared Hit Blocks'),
    'Shared Read Blocks': sum('Shared Read Blocks'),
    Plans: nested.map((p) => p.Plan),
  } as PlanNode;
}

/**
 * One claim through a `PgOutboxStore` on a connection of `pool`, in a transaction rolled back
 * afterwards (the outbox is left as loaded): the claim statement runs under `EXPLAIN (ANALYZE,
 * BUFFERS)` first, in a savepoint rolled back (EXPLAIN ANALYZE really runs the UPDATE), then for
 * its result. Other statements the store runs first (the approval expiry sweep) are not explained.
 */
export async function explainedClaim(
  pool: pg.Pool,
  request: ClaimRequest,
): Promise<{ plan: PlanNode; claimed: OutgoingMessage[] }> {
  let plan: PlanNode | undefined;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const explaining: SqlExecutor = {
      query: async <Row>(text: string, values: readonly unknown[] = []) => {
        if (CALLS_CLAIM.test(text)) {
          await client.query('SAVEPOINT explained');
          plan = await explainAnalyze(client, text, values);
          await client.query('ROLLBACK TO SAVEPOINT explained');
        }
        return (await client.query(text, [...values])) as unknown as { rows: Row[] };
      },
    };
    const claimed = await new PgOutboxStore(explaining).claim(request);
    if (!plan) throw new Error('explainedClaim: the store ran no outbox_claim statement');
    return { plan, claimed };
  } finally {
    await client.query('ROLLBACK');
    client.release();
  }
}

const CALLS_CLAIM = /\boutbox_claim\(/;

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
          sample.rowsRead = rowsRead(await explainAnalyze(client, text, values));
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

/** A statement's plan as auto_explain reports it (with its text). */
export interface LoggedPlan {
  'Query Text': string;
  Plan: PlanNode;
}

/**
 * Runs `fn` on `client` with auto_explain loaded for the session (analyze, buffers, nested
 * statements: what PL/pgSQL functions and triggers run, with the plans they cache), and returns
 * every plan it logged, the outer statement's included.
 */
export async function nestedPlans(
  client: pg.ClientBase,
  fn: () => Promise<unknown>,
): Promise<LoggedPlan[]> {
  const plans: LoggedPlan[] = [];
  const onNotice = (notice: { message?: string }) => {
    const message = notice.message ?? '';
    const json = message.indexOf('{');
    if (json >= 0) plans.push(JSON.parse(message.slice(json)) as LoggedPlan);
  };
  const settings = [
    `auto_explain.log_min_duration = 0`,
    `auto_explain.log_nested_statements = on`,
    `auto_explain.log_analyze = on`,
    `auto_explain.log_buffers = on`,
    `auto_explain.log_format = json`,
    `auto_explain.log_level = notice`,
  ];
  await client.query(`LOAD 'auto_explain'`);
  for (const setting of settings) await client.query(`SET ${setting}`);
  client.on('notice', onNotice);
  try {
    await fn();
  } finally {
    client.off('notice', onNotice);
    for (const setting of settings) await client.query(`RESET ${setting.split(' ')[0]}`);
  }
  return plans;
}
