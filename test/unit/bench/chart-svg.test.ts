import { describe, expect, it } from 'vitest';
import { benchmarkChartSvg, type ChartInput } from '../../../bench/lib/chart-svg.js';

const input: ChartInput = {
  mode: 'full',
  measuredAt: '2026-12-01T17:50:00.123Z',
  postgres: 'PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc',
  machine: { cpus: 2, node: 'v20.20.2' },
  latency_ms: {
    raw_notify: { p50: 0.28, p95: 0.75, p99: 1.38 },
    polling: { p50: 5.7, p95: 759, p99: 953 },
    notify: { p50: 5.38, p95: 9.34, p99: 13.01 },
    graphile_worker: { p50: 5.58, p95: 9.75, p99: 13.46 },
    cdc: null,
    raw_cdc: null,
  },
  details: {
    peers: {
      pgBossRatio: 4,
      graphileWorkerRatio: 2,
      rawSqlVsPgBoss: 5,
      rawSqlVsGraphileWorker: 2.5,
    },
  },
};

describe('benchmark chart (bench/lib/chart-svg.ts)', () => {
  const svg = benchmarkChartSvg(input);

  it('is one SVG document naming its run', () => {
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.trim().endsWith('</svg>')).toBe(true);
    expect(svg).toContain('full run of 2026-12-01 17:50:00Z');
    expect(svg).toContain('2 vCPU, PostgreSQL 15.20, Node v20.20.2');
  });

  it('puts ours, the peers and the raw baseline on one scale: the raw SQL loop = 1', () => {
    // ours / raw = (ours / pg-boss) / (raw / pg-boss) = 4 / 5; pg-boss 1 / 5; graphile 1 / 2.5.
    expect(svg).toMatch(/>agent-outbox<\/text>[^]*?>0\.80×</);
    expect(svg).toMatch(/>pg-boss 10<\/text>[^]*?>0\.20×</);
    expect(svg).toMatch(/>graphile-worker 0\.17<\/text>[^]*?>0\.40×</);
    expect(svg).toMatch(/>raw claim\+mark SQL \(baseline\)<\/text>[^]*?>1\.00×</);
  });

  it('draws the latency percentiles of each measured mode and leaves out the n/a ones', () => {
    expect(svg).toContain('>5.38 / 9.34 / 13.0<');
    expect(svg).toContain('>5.70 / 759 / 953<');
    expect(svg).not.toContain('ours: CDC');
    expect(svg).not.toContain('bare logical stream');
  });

  it('uses no font under 12 px', () => {
    const sizes = [...svg.matchAll(/font-size="(\d+)"/g)].map((m) => Number(m[1]));
    expect(sizes.length).toBeGreaterThan(10);
    expect(Math.min(...sizes)).toBeGreaterThanOrEqual(12);
  });
});
