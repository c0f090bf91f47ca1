/**
 * The benchmark chart (issue 26), drawn from the results bench/main.ts writes: dispatch
 * throughput of ours beside pg-boss, graphile-worker and the raw claim-and-mark SQL loop, and
 * commit-to-publish latency percentiles per mode. Plain SVG text, no dependency; fonts at 12 px
 * and up.
 *
 * bench/main.ts calls {@link writeBenchmarkChart} after every run (bench/results/latest.svg;
 * docs/benchmarks.svg too after a full run). Redraw from any results file:
 *
 *   npx tsx bench/lib/chart-svg.ts [bench/results/latest.json] [docs/benchmarks.svg]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';

interface Percentiles {
  p50: number;
  p95: number;
  p99: number;
}

/** The part of bench/results/latest.json the chart reads. */
export interface ChartInput {
  mode: string;
  measuredAt: string;
  postgres?: string;
  machine?: { cpus?: number; node?: string };
  latency_ms: Record<string, Percentiles | null>;
  details: {
    peers: {
      pgBossRatio: number;
      graphileWorkerRatio: number;
      rawSqlVsPgBoss: number;
      rawSqlVsGraphileWorker: number;
    };
  };
}

const WIDTH = 820;
const FONT = 'font-family="system-ui, -apple-system, Segoe UI, sans-serif"';
const COLORS = {
  ours: '#2563eb',
  peer: '#9ca3af',
  raw: '#111827',
  p50: '#93c5fd',
  p95: '#2563eb',
  p99: '#1e3a8a',
};

/** Latency modes in the order drawn, with their labels. */
const LATENCY_MODES: [key: string, label: string][] = [
  ['raw_notify', 'bare pg_notify (floor)'],
  ['notify', 'ours: LISTEN/NOTIFY'],
  ['graphile_worker', 'graphile-worker'],
  ['raw_cdc', 'bare logical stream (floor)'],
  ['cdc', 'ours: CDC'],
  ['polling', 'ours: polling (1 s)'],
];

/** The chart for `results`, as SVG text. */
export function benchmarkChartSvg(results: ChartInput): string {
  const out: string[] = [];
  const peers = results.details.peers;
  // Every rate relative to the raw claim-and-mark loop of the same run (peers case).
  const bars: { label: string; value: number; color: string }[] = [
    { label: 'raw claim+mark SQL (baseline)', value: 1, color: COLORS.raw },
    { label: 'agent-outbox', value: peers.pgBossRatio / peers.rawSqlVsPgBoss, color: COLORS.ours },
    { label: 'graphile-worker 0.17', value: 1 / peers.rawSqlVsGraphileWorker, color: COLORS.peer },
    { label: 'pg-boss 10', value: 1 / peers.rawSqlVsPgBoss, color: COLORS.peer },
  ];
  const labelWidth = 230;
  const plotWidth = WIDTH - labelWidth - 90;
  const maxBar = Math.max(...bars.map((b) => b.value), 1);
  let y = 28;
  const when = results.measuredAt.replace(/\.\d+Z$/, 'Z').replace('T', ' ');
  out.push(
    text(16, y, `agent-outbox benchmarks — ${results.mode} run of ${when}`, 16, 'bold'),
    text(
      16,
      (y += 20),
      `${results.machine?.cpus ?? '?'} vCPU, ${postgresVersion(results.postgres)}, Node ${results.machine?.node ?? '?'}; ratios within this run (npm run bench)`,
      12,
      'normal',
      '#4b5563',
    ),
  );
  y += 34;
  out.push(
    text(16, y, 'Dispatch throughput, relative to the raw SQL loop (higher is better)', 14, 'bold'),
  );
  y += 12;
  for (const bar of bars) {
    const width = Math.max(1, (bar.value / maxBar) * plotWidth);
    out.push(
      text(labelWidth - 8, y + 15, bar.label, 13, 'normal', '#111827', 'end'),
      `<rect x="${labelWidth}" y="${y + 3}" width="${width.toFixed(1)}" height="18" fill="${bar.color}" rx="2"/>`,
      text(labelWidth + width + 6, y + 16, `${bar.value.toFixed(2)}×`, 13, 'normal'),
    );
    y += 26;
  }

  y += 30;
  out.push(text(16, y, 'Commit → publish latency, ms (log scale; lower is better)', 14, 'bold'));
  y += 10;
  const rows = LATENCY_MODES.filter(([key]) => results.latency_ms[key]);
  // Up to 2 s (polling's p99 passes 1 s); room on the right for the p50 / p95 / p99 label.
  const min = 0.1;
  const max = 2000;
  const latencyWidth = WIDTH - labelWidth - 150;
  const xOf = (ms: number) =>
    labelWidth +
    (Math.log10(Math.min(Math.max(ms, min), max) / min) / Math.log10(max / min)) * latencyWidth;
  const top = y;
  for (const [key, label] of rows) {
    const p = results.latency_ms[key]!;
    out.push(text(labelWidth - 8, y + 24, label, 13, 'normal', '#111827', 'end'));
    (['p99', 'p95', 'p50'] as const).forEach((q) => {
      const x = xOf(p[q]);
      out.push(
        `<rect x="${labelWidth}" y="${y + 12}" width="${(x - labelWidth).toFixed(1)}" height="16" fill="${COLORS[q]}"/>`,
      );
    });
    out.push(
      text(
        xOf(p.p99) + 6,
        y + 25,
        `${fmt(p.p50)} / ${fmt(p.p95)} / ${fmt(p.p99)}`,
        12,
        'normal',
        '#374151',
      ),
    );
    y += 26;
  }
  const bottom = y + 10;
  for (const tick of [0.1, 1, 10, 100, 1000]) {
    const x = xOf(tick);
    out.push(
      `<line x1="${x.toFixed(1)}" y1="${top + 8}" x2="${x.toFixed(1)}" y2="${bottom}" stroke="#e5e7eb"/>`,
      text(x, bottom + 16, String(tick), 12, 'normal', '#4b5563', 'middle'),
    );
  }
  y = bottom + 40;
  const legend: [string, string][] = [
    ['p50', COLORS.p50],
    ['p95', COLORS.p95],
    ['p99', COLORS.p99],
  ];
  legend.forEach(([name, color], i) => {
    const x = labelWidth + i * 80;
    out.push(
      `<rect x="${x}" y="${y - 11}" width="14" height="14" fill="${color}"/>`,
      text(x + 20, y, name, 12, 'normal'),
    );
  });
  out.push(text(labelWidth + 260, y, 'labels: p50 / p95 / p99 ms', 12, 'normal', '#4b5563'));
  const height = y + 20;
  // Grid lines first, so bars draw over them.
  const grid = out.filter((line) => line.startsWith('<line'));
  const rest = out.filter((line) => !line.startsWith('<line'));
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" role="img">`,
    `<title>agent-outbox benchmarks, ${results.mode} run of ${when}</title>`,
    `<rect width="${WIDTH}" height="${height}" fill="#ffffff"/>`,
    ...grid,
    ...rest,
    '</svg>',
    '',
  ].join('\n');
}

/**
 * Writes the chart of `results` next to the results (bench/results/latest.svg) and, for a full
 * run, as docs/benchmarks.svg, the one the docs embed. Returns the paths written.
 */
export function writeBenchmarkChart(results: ChartInput): string[] {
  const svg = benchmarkChartSvg(results);
  const targets = [new URL('../results/latest.svg', import.meta.url)];
  if (results.mode === 'full') targets.push(new URL('../../docs/benchmarks.svg', import.meta.url));
  for (const target of targets) writeFileSync(target, svg);
  return targets.map((target) => fileURLToPath(target));
}

/** `PostgreSQL 15.20` out of `version()`'s long string. */
function postgresVersion(version: string | undefined): string {
  return version?.split(' ').slice(0, 2).join(' ') ?? 'PostgreSQL';
}

function fmt(ms: number): string {
  return ms >= 100 ? ms.toFixed(0) : ms >= 10 ? ms.toFixed(1) : ms.toFixed(2);
}

function text(
  x: number,
  y: number,
  content: string,
  size: number,
  weight: 'bold' | 'normal',
  fill = '#111827',
  anchor: 'start' | 'middle' | 'end' = 'start',
): string {
  const escaped = content.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${FONT} font-size="${size}" font-weight="${weight}" fill="${fill}" text-anchor="${anchor}">${escaped}</text>`;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const input =
    process.argv[2] ?? fileURLToPath(new URL('../results/latest.json', import.meta.url));
  const output =
    process.argv[3] ?? fileURLToPath(new URL('../../docs/benchmarks.svg', import.meta.url));
  writeFileSync(output, benchmarkChartSvg(JSON.parse(readFileSync(input, 'utf8')) as ChartInput));
  console.log(`chart of ${input} written to ${output}`);
}
