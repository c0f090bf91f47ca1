/**
 * The demo's summary: counts what happened and checks the invariants the product promises
 * (SPEC §2) against the database, the fake payment provider and the mailbox — not against the
 * demo's own counters, so a bug anywhere on the path shows up as a failed check.
 */
import { TOPIC, type FakePaymentProvider, type Mailbox } from '../orders/index.js';
import { readMessageFacts, type MessageFact } from './message-facts.js';

export type { MessageFact } from './message-facts.js';
import type { DemoPipeline, PipelineCounters } from './pipeline.js';

/** What the agent's tool calls came to, as the tools answered them. */
export interface ToolCallTally {
  calls: number;
  committed: number;
  deduped: number;
  failed: number;
}

/** A tool answer as MCP returns it. */
export interface ToolAnswer {
  content?: unknown;
  isError?: boolean;
}

/** Reads the JSON block every outbox tool answers with (see docs/agent.md). */
export function classifyToolAnswer(raw: ToolAnswer | object): {
  kind: 'committed' | 'deduped' | 'failed';
  json: Record<string, unknown>;
} {
  const answer = raw as ToolAnswer;
  // MCP answers carry content blocks; a transcript may flatten them to one string.
  const blocks =
    typeof answer.content === 'string'
      ? [{ text: answer.content.split('\n')[0] }]
      : Array.isArray(answer.content)
        ? (answer.content as { text?: unknown }[])
        : [];
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(String(blocks[0]?.text ?? '{}')) as Record<string, unknown>;
  } catch {
    /* not our tool's answer: counted as failed below */
  }
  if (answer.isError || json.ok !== true) return { kind: 'failed', json };
  return { kind: json.deduped === true ? 'deduped' : 'committed', json };
}

/** Adds one answer to a tally; returns its classification. */
export function tallyToolAnswer(tally: ToolCallTally, answer: ToolAnswer | object) {
  const classified = classifyToolAnswer(answer);
  tally.calls++;
  tally[classified.kind]++;
  return classified;
}

/** A new, empty tally. */
export function emptyTally(): ToolCallTally {
  return { calls: 0, committed: 0, deduped: 0, failed: 0 };
}

/** One checked invariant. */
export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** Everything the summary prints. */
export interface DemoReport {
  orders: { total: number; refunded: number };
  messages: { total: number; byTopic: Record<string, number>; dispatched: number; dead: number };
  published: number;
  retries: { publish: number; consumer: number };
  duplicatesSuppressed: { tool: number; consumer: number };
  effects: { charges: number; refunds: number; mails: number; providerReplays: number };
  /** Messages held for approval (issue 20), by how they were decided, and who approved. */
  approvals: {
    held: number;
    approved: number;
    rejected: number;
    waiting: number;
    approvers: string;
  };
  latency: { p50: number; p95: number; max: number };
  publishedOnAttempt: Record<number, number>;
  checks: Check[];
  ok: boolean;
}

/** Optional expectations of a scripted run (the real model may do otherwise). */
export interface Expectations {
  orders?: number;
  refunds?: number;
  /** At least this many tool calls answered deduped. */
  toolDeduped?: number;
  /** At least this many deliveries recognised by the ledger as duplicates. */
  consumerDuplicates?: number;
}

function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  const x = [...a].sort();
  const y = [...b].sort();
  return x.length === y.length && x.every((v, i) => v === y[i]);
}

const TRACEPARENT = /^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/;

/**
 * What the report is computed from, read from whichever database the demo ran on (Postgres here,
 * SQLite in sqlite.ts), the fake payment provider, the mailbox and the pipeline's counters.
 */
export interface DemoFacts {
  orders: { id: number; status: string }[];
  messages: MessageFact[];
  /** Idempotency keys the tools kept (one per committed call). */
  toolKeys: number | undefined;
  approvals: DemoReport['approvals'];
  provider: FakePaymentProvider;
  mailbox: Mailbox;
  counters: PipelineCounters;
  published: number;
  /** Whether every message must carry a traceparent (the agent tools write one; SQLite's don't). */
  traceContext: boolean;
}

/** Collects the report; call after `pipeline.settle()`. */
export async function buildReport(
  pipeline: DemoPipeline,
  tally: ToolCallTally,
  expect: Expectations = {},
): Promise<DemoReport> {
  const { executor, example, counters } = pipeline;
  const orders = (
    await executor.query<{ id: number; status: string }>(
      'SELECT id, status FROM orders ORDER BY id',
    )
  ).rows.map((o) => ({ id: Number(o.id), status: o.status }));
  const facts = await readMessageFacts(executor);
  const messages: MessageFact[] = facts.map(({ status: _, ...m }) => m);
  const keys = (
    await executor.query<{ n: number }>('SELECT count(*)::int AS n FROM outbox_tool_calls')
  ).rows[0]?.n;
  // A decision made shows as the status's `decidedBy`; rejected and expired are states of their own.
  const decided = facts.filter((m) => m.status.decidedBy !== undefined);
  const refused = facts.filter((m) => ['rejected', 'expired'].includes(m.status.state));
  const approved = decided.filter((m) => !refused.includes(m));
  const waiting = facts.filter((m) => m.status.state === 'awaiting approval').length;
  const approvals: DemoReport['approvals'] = {
    held: approved.length + refused.length + waiting,
    approved: approved.length,
    rejected: refused.length,
    waiting,
    approvers: [...new Set(approved.map((m) => m.status.decidedBy!))].sort().join(', '),
  };
  return assembleReport(
    {
      orders,
      messages,
      toolKeys: keys,
      approvals,
      provider: example.provider,
      mailbox: example.mailbox,
      counters,
      published: pipeline.publisher.published.length,
      traceContext: true,
    },
    tally,
    expect,
  );
}

/** The counts and checks of a run, from its facts (both demos). */
export async function assembleReport(
  facts: DemoFacts,
  tally: ToolCallTally,
  expect: Expectations = {},
): Promise<DemoReport> {
  const { orders, messages, toolKeys: keys, approvals, counters } = facts;
  const byTopic: Record<string, number> = {};
  for (const m of messages) byTopic[m.topic] = (byTopic[m.topic] ?? 0) + 1;
  const idsOf = (topic: string, aggregateId?: string) =>
    messages
      .filter((m) => m.topic === topic && (!aggregateId || m.aggregate_id === aggregateId))
      .map((m) => m.id);
  const charges = facts.provider.list('charge');
  const refunds = facts.provider.list('refund');
  const mails = await facts.mailbox.list();
  const refunded = orders.filter((o) => o.status === 'refunded');

  const checks: Check[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });

  const dispatched = messages.filter((m) => m.dispatched).length;
  const dead = messages.filter((m) => m.dead).length;
  check(
    'every message published (G2), none dead-lettered',
    dispatched === messages.length && dead === 0 && counters.consumerDead === 0,
    `${dispatched}/${messages.length} dispatched, ${dead} dead, ${counters.consumerDead} dead at consumers`,
  );
  check(
    'rows match the committed calls (G1)',
    messages.length === 2 * orders.length + 2 * refunded.length &&
      keys === tally.committed &&
      orders.length + refunded.length === tally.committed,
    `${orders.length} orders + ${refunded.length} refunds from ${tally.committed} committed calls, ` +
      `${messages.length} messages, ${keys} idempotency keys kept (failed calls kept none)`,
  );
  const perOrder = (records: typeof charges, order: { id: number }, topic: string) => {
    const mine = records.filter((r) => r.orderId === order.id);
    return (
      mine.length === 1 && sameSet([mine[0]!.idempotencyKey], idsOf(topic, `order:${order.id}`))
    );
  };
  check(
    'each charge performed exactly once (G5)',
    charges.length === orders.length && orders.every((o) => perOrder(charges, o, TOPIC.charge)),
    `${charges.length} charges for ${orders.length} orders`,
  );
  check(
    'each refund performed exactly once (G5)',
    refunds.length === refunded.length && refunded.every((o) => perOrder(refunds, o, TOPIC.refund)),
    `${refunds.length} refunds for ${refunded.length} refunded orders`,
  );
  check(
    'each mail sent exactly once (G5)',
    sameSet(
      mails.map((m) => m.key),
      idsOf(TOPIC.mail),
    ),
    `${mails.length} mails for ${idsOf(TOPIC.mail).length} mail messages`,
  );
  if (facts.traceContext)
    check(
      'trace context on every message',
      messages.every((m) => m.traceparent !== null && TRACEPARENT.test(m.traceparent)),
      `${messages.filter((m) => m.traceparent && TRACEPARENT.test(m.traceparent)).length}/${messages.length} carry a traceparent`,
    );
  if (expect.orders !== undefined || expect.refunds !== undefined)
    check(
      'orders as scripted',
      (expect.orders ?? orders.length) === orders.length &&
        (expect.refunds ?? refunded.length) === refunded.length,
      `expected ${expect.orders ?? '-'} orders / ${expect.refunds ?? '-'} refunds, got ${orders.length} / ${refunded.length}`,
    );
  if (expect.toolDeduped !== undefined || expect.consumerDuplicates !== undefined)
    check(
      'duplicates suppressed',
      tally.deduped >= (expect.toolDeduped ?? 0) &&
        counters.consumerDuplicates >= (expect.consumerDuplicates ?? 0),
      `${tally.deduped} deduped tool calls, ${counters.consumerDuplicates} duplicate deliveries`,
    );

  const publishedOnAttempt: Record<number, number> = {};
  counters.publishedOnAttempt.forEach((n, attempt) => {
    if (n) publishedOnAttempt[attempt] = n;
  });
  return {
    orders: { total: orders.length, refunded: refunded.length },
    messages: { total: messages.length, byTopic, dispatched, dead },
    published: facts.published,
    retries: { publish: counters.publishRetries, consumer: counters.consumerRetries },
    duplicatesSuppressed: { tool: tally.deduped, consumer: counters.consumerDuplicates },
    effects: {
      charges: charges.length,
      refunds: refunds.length,
      mails: mails.length,
      providerReplays: facts.provider.replays,
    },
    approvals: {
      held: Number(approvals.held),
      approved: Number(approvals.approved),
      rejected: Number(approvals.rejected),
      waiting: Number(approvals.waiting),
      approvers: approvals.approvers,
    },
    latency: {
      p50: percentile(counters.latenciesMs, 50),
      p95: percentile(counters.latenciesMs, 95),
      max: percentile(counters.latenciesMs, 100),
    },
    publishedOnAttempt,
    checks,
    ok: checks.every((c) => c.ok),
  };
}

/** The summary lines (the demo test reads the `effects` line). */
export function formatReport(report: DemoReport, tally: ToolCallTally): string[] {
  const topics = Object.entries(report.messages.byTopic)
    .map(([topic, n]) => `${topic} ${n}`)
    .join(', ');
  const attempts = Object.entries(report.publishedOnAttempt)
    .map(([attempt, n]) => `${n} on attempt ${attempt}`)
    .join(', ');
  const once = report.checks.filter((c) => c.name.includes('exactly once')).every((c) => c.ok);
  return [
    '',
    '── summary ─────────────────────────────────────────────',
    `tool calls   ${tally.calls}: ${tally.committed} committed, ${tally.deduped} deduped, ${tally.failed} failed and rolled back`,
    `orders       ${report.orders.total} (${report.orders.refunded} refunded)`,
    `messages     ${report.messages.total} (${topics})`,
    `published    ${report.published} (${attempts})`,
    `retries      ${report.retries.publish} publish attempts failed transiently and were retried; ${report.retries.consumer} consumer retries`,
    `duplicates   ${report.duplicatesSuppressed.tool + report.duplicatesSuppressed.consumer} suppressed: ${report.duplicatesSuppressed.tool} by the tools' idempotency keys, ${report.duplicatesSuppressed.consumer} by the consumer ledger`,
    `effects      ${report.effects.charges} charges, ${report.effects.refunds} refunds, ${report.effects.mails} mails — each exactly once: ${once ? 'yes' : 'NO'}`,
    ...(report.approvals.held > 0
      ? [
          `approvals    ${report.approvals.held} held for a person: ${report.approvals.approved} approved${report.approvals.approvers ? ` (by ${report.approvals.approvers})` : ''}, ${report.approvals.rejected} rejected, ${report.approvals.waiting} waiting`,
        ]
      : []),
    `latency      commit → publish p50 ${report.latency.p50} ms, p95 ${report.latency.p95} ms, max ${report.latency.max} ms`,
    '── checks ──────────────────────────────────────────────',
    ...report.checks.map((c) => `${c.ok ? 'ok  ' : 'FAIL'} ${c.name} — ${c.detail}`),
    report.ok ? 'All invariants hold.' : 'INVARIANTS FAILED.',
  ];
}
