import type { deepBacklog, idleAggregates } from './cases/backlog-shape.js';
import type { blockedClaim } from './cases/blocked-claim.js';
import type { enqueueOverhead } from './cases/enqueue.js';
import type { hotAggregate, hotAggregateHttp } from './cases/hot-aggregate.js';
import type { dispatchVsPeers } from './cases/peers.js';
import type { tracingOverhead } from './cases/tracing.js';
import type { Percentiles } from './lib/measure.js';

/**
 * Prints the table of a full run's keys (main.ts's results): each figure with what it was
 * measured against in the same run and its target; `caseRows` are the rows of the case groups
 * `--only` can pick, at the end.
 */
export function printTable(
  r: Record<string, unknown> & { latency_ms: Record<string, Percentiles | null> },
  caseRows: string[],
) {
  const d = r.details as {
    enqueue: Awaited<ReturnType<typeof enqueueOverhead>>;
    notify: { txPerSecond: Record<string, number> };
    dispatch: { rowsPerSecond: Record<string, number> };
    tracing: Awaited<ReturnType<typeof tracingOverhead>>;
    peers: Awaited<ReturnType<typeof dispatchVsPeers>>;
    history: { historyRows: number; rowsPerSecond: Record<string, number> };
    rss: { baselineRssMb: number };
    hot: Awaited<ReturnType<typeof hotAggregate>>;
    hotHttp: Awaited<ReturnType<typeof hotAggregateHttp>>;
    blocked: Awaited<ReturnType<typeof blockedClaim>>;
    deep: Awaited<ReturnType<typeof deepBacklog>>;
    idle: Awaited<ReturnType<typeof idleAggregates>>;
  };
  const n = (value: number) => value.toLocaleString('en-US');
  const line = (key: string, value: unknown, baseline: string, target: string) =>
    `| ${key} | ${value === null ? 'n/a' : String(value)} | ${baseline} | ${target} |`;
  const lease = d.peers.leaseCost.vsPgBoss;
  const lat = (p: Percentiles | null) => (p ? `${p.p50} / ${p.p95} / ${p.p99}` : 'n/a');
  const out = [
    '| figure | value | measured against (same run) | target |',
    '| --- | --- | --- | --- |',
    line(
      'enqueue_overhead',
      r.enqueue_overhead,
      `${d.enqueue.withOutboxMsPerTx} vs ${d.enqueue.withoutOutboxMsPerTx} ms/tx without outbox, 1 client`,
      '<= 1.6 (issue 25; 1.35 before)',
    ),
    line(
      'floor: enqueue_overhead by part',
      d.enqueue.floor.rowsWithTriggers,
      `the 2 rows with the triggers, no writer; one extra round trip ${d.enqueue.floor.oneExtraRoundTrip}, + the 2 rows without any index ${d.enqueue.floor.rowsWithoutIndexes}, with the indexes ${d.enqueue.floor.rowsAndIndexesOnly}, + sequence counter ${d.enqueue.floor.rowsWithCounter}, + wake check (both triggers) ${d.enqueue.floor.rowsWithTriggers}`,
      'context: where enqueue_overhead stops',
    ),
    line(
      'notify_enqueue_ratio',
      r.notify_enqueue_ratio,
      `${d.notify.txPerSecond.on} vs ${d.notify.txPerSecond.off} tx/s, 8 clients, wake-ups off`,
      '>= 0.9',
    ),
    line(
      'notify_unconditional_enqueue_ratio',
      r.notify_unconditional_enqueue_ratio,
      `${d.notify.txPerSecond.unconditional} tx/s with a NOTIFY in every transaction`,
      'context',
    ),
    line(
      'notify_always_armed_enqueue_ratio',
      r.notify_always_armed_enqueue_ratio,
      `${d.notify.txPerSecond.armed} tx/s with a waiter row always live (worst case)`,
      'context',
    ),
    line(
      'dispatch_vs_raw_sql',
      r.dispatch_vs_raw_sql,
      `${d.dispatch.rowsPerSecond.ours} vs ${d.dispatch.rowsPerSecond.raw} rows/s raw claim+mark`,
      '>= 1.0 (issue 25)',
    ),
    line(
      'dispatch_ordered_vs_raw_sql',
      r.dispatch_ordered_vs_raw_sql,
      `${d.dispatch.rowsPerSecond.oursOrdered} vs ${d.dispatch.rowsPerSecond.rawOrdered} rows/s, 500 aggregates`,
      '>= 0.9 (issue 25)',
    ),
    line(
      'tracing_overhead',
      r.tracing_overhead,
      'ratio' in d.tracing.lanesBroker
        ? `lanes engine, NATS JetStream publisher; median of pairs; ${d.tracing.lanesBroker.rowsPerSecond.withSdk} vs ${d.tracing.lanesBroker.rowsPerSecond.withoutSdk} rows/s dispatch, OpenTelemetry SDK exporting every span (batch processor, OTLP/HTTP protobuf to a discarding endpoint) vs no SDK; CPU ${d.tracing.lanesBroker.cpuMicrosPerMessage.withSdk} vs ${d.tracing.lanesBroker.cpuMicrosPerMessage.withoutSdk} µs per message; ${d.tracing.lanesBroker.spans.exported} of ${d.tracing.lanesBroker.spans.ended} spans exported${'ratio' in d.tracing.broker ? `; claim engine ${d.tracing.broker.ratio}` : ''}; claim engine with an HTTP publisher ${d.tracing.http.ratio}`
        : `not measured: ${d.tracing.lanesBroker.skipped}`,
      '>= 0.8',
    ),
    line(
      'tracing_overhead_noop',
      r.tracing_overhead_noop,
      `claim engine, no-op publisher (worst case); ${d.tracing.noop.rowsPerSecond.withSdk} vs ${d.tracing.noop.rowsPerSecond.withoutSdk} rows/s; CPU ${d.tracing.noop.cpuMicrosPerMessage.withSdk} vs ${d.tracing.noop.cpuMicrosPerMessage.withoutSdk} µs per message; ${d.tracing.noop.spans.exported} of ${d.tracing.noop.spans.ended} spans exported; no-SDK path ${d.tracing.noSdk.nsPerBatch} ns per batch of 200`,
      'reported',
    ),
    line(
      'dispatch_vs_pg_boss',
      r.dispatch_vs_pg_boss,
      `${d.peers.perSecond.ours} vs ${d.peers.perSecond.pgBoss} jobs/s pg-boss tuned (${d.peers.count.toLocaleString('en-US')} no-op jobs)`,
      '>= 5',
    ),
    line(
      'dispatch_vs_graphile_worker',
      r.dispatch_vs_graphile_worker,
      `${d.peers.perSecond.oursAtGraphileFetch} (batch 500, the peer's local queue) vs ${d.peers.perSecond.graphileWorker} jobs/s graphile-worker tuned; at batch 200 ${d.peers.graphileWorkerRatioAtBatch200} (${d.peers.perSecond.ours} jobs/s)`,
      '>= 1.5 (issue 25; 5 in issue 7)',
    ),
    line(
      'ceiling: minimal claim+delete / graphile-worker',
      d.peers.minimalDeleteVsGraphileWorker,
      `${d.peers.perSecond.minimalTableClaimDelete} rows/s on a minimal queue table (claim+mark: ${d.peers.perSecond.minimalTableClaimMark}); pg-boss: ${d.peers.minimalDeleteVsPgBoss}`,
      'context: the most any claim+settle design reaches here',
    ),
    line(
      'ceiling: raw lease loop on our table / pg-boss',
      d.peers.rawSqlVsPgBoss,
      `${d.peers.perSecond.rawSql} rows/s; without the message-id index ${lease.withoutMessageIdIndex} (ours ${lease.oursWithoutMessageIdIndex}), primary key + pending index only ${lease.keyAndPendingOnly}, minimal table ${d.peers.minimalMarkVsPgBoss}; row locks held across the publish (ruled out by SPEC §4.4) ${lease.lockHeldAcrossPublish}`,
      'context: where dispatch_vs_pg_boss stops (bench/cases/lease-cost.ts)',
    ),
    ...Object.entries(r.latency_ms).map(([mode, p]) =>
      line(
        `latency_ms.${mode} p50/p95/p99`,
        lat(p),
        mode === 'graphile_worker'
          ? '1,000 jobs/s steady, COMMIT sent → task start (tuned)'
          : !p && (mode.endsWith('cdc') || mode === 'cdc_sync_claim')
            ? 'not measured: needs wal_level=logical on this server'
            : '1,000 msg/s steady, COMMIT sent → publish',
        mode === 'notify'
          ? 'p50 and p95 <= 0.5x graphile_worker (issue 43; the lanes engine, a new schema’s)'
          : mode === 'cdc'
            ? "p95 <= notify's (issue 43; the lanes engine)"
            : mode === 'raw_notify' || mode === 'raw_cdc'
              ? `floor of ${mode.slice(4)}`
              : mode === 'raw_claim'
                ? 'floor of a claim-based design (issue 43)'
                : mode === 'notify_claims' || mode === 'cdc_claims'
                  ? `the claim engine (${mode.slice(0, -7)}'s target on it)`
                  : 'context',
      ),
    ),
    line(
      'history_scaling',
      r.history_scaling,
      `${d.history.rowsPerSecond.withHistory} vs ${d.history.rowsPerSecond.empty} rows/s, ${d.history.historyRows.toLocaleString('en-US')} dispatched rows vs none`,
      '>= 0.9',
    ),
    line(
      'dispatcher_rss_mb',
      r.dispatcher_rss_mb,
      `idle process with the same modules: ${d.rss.baselineRssMb} MiB`,
      '< 150',
    ),
    line(
      'hot_aggregate_ratio',
      r.hot_aggregate_ratio,
      `${d.hot.perSecond.oneAggregate} vs ${d.hot.perSecond.fiveHundredAggregates} msg/s, ${n(d.hot.count)} ordered messages on 1 aggregate vs on 500, no-op publisher`,
      '>= 0.5',
    ),
    line(
      'hot_aggregate_http_ratio',
      r.hot_aggregate_http_ratio,
      `${d.hotHttp.perSecond.ours} vs ${d.hotHttp.perSecond.plainLoop} msg/s, the 1-aggregate drain to a local HTTP sink vs a plain loop POSTing the same envelopes, each awaited`,
      '>= 0.5',
    ),
    line(
      'blocked_claim_ms',
      r.blocked_claim_ms,
      `p95 of a claim of 200 heads with ${n(d.blocked.depth)} messages behind a dead-lettered head (p50 ${d.blocked.ms.blocked.p50}); the same claim with nothing blocked: p50 ${d.blocked.ms.plain.p50}, p95 ${d.blocked.ms.plain.p95} ms`,
      '<= 5',
    ),
    line(
      'deep_backlog_ratio',
      r.deep_backlog_ratio,
      `${d.deep.perSecond.twentyAggregates} vs ${d.deep.perSecond.fiveThousandAggregates} msg/s, ${n(d.deep.count)} messages on 20 aggregates vs on 5,000`,
      '>= 0.8',
    ),
    line(
      'idle_aggregates_ratio',
      r.idle_aggregates_ratio,
      `${d.idle.perSecond.withIdle} vs ${d.idle.perSecond.empty} msg/s, the 500-aggregate drain beside ${n(d.idle.idleAggregates)} idle aggregates vs none`,
      '>= 0.9',
    ),
    ...caseRows,
  ];
  process.stdout.write(`${out.join('\n')}\n\nwritten to bench/results/latest.json\n`);
}
