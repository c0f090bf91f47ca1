/**
 * Renders spans exported over OTLP/HTTP JSON as a waterfall SVG (what a tracing UI shows):
 * one row per span, indented under its parent, a bar from start to end on a shared time axis.
 * Used by trace-waterfall.ts for the picture in the README's "Tracing" section.
 */

/** One span as OTLP/JSON carries it, flattened with its service. */
export interface ExportedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  /** OTLP span kind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, string | number | boolean>;
  links: { traceId: string; spanId: string }[];
  error: boolean;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
type OtlpAttributes = { key: string; value: OtlpValue }[];

/** Flattens OTLP/JSON export requests into spans. */
export function spansOf(requests: readonly unknown[]): ExportedSpan[] {
  const attrs = (list: OtlpAttributes = []) =>
    Object.fromEntries(
      list.map(({ key, value }) => [
        key,
        value.stringValue ??
          (value.intValue !== undefined ? Number(value.intValue) : undefined) ??
          value.boolValue ??
          value.doubleValue ??
          '',
      ]),
    ) as Record<string, string | number | boolean>;
  const spans: ExportedSpan[] = [];
  for (const request of requests as {
    resourceSpans: {
      resource: { attributes: OtlpAttributes };
      scopeSpans: {
        spans: {
          traceId: string;
          spanId: string;
          parentSpanId?: string;
          name: string;
          kind: number;
          startTimeUnixNano: string;
          endTimeUnixNano: string;
          attributes?: OtlpAttributes;
          links?: { traceId: string; spanId: string }[];
          status?: { code?: number };
        }[];
      }[];
    }[];
  }[]) {
    for (const resourceSpans of request.resourceSpans) {
      const service = String(attrs(resourceSpans.resource.attributes)['service.name']);
      for (const scope of resourceSpans.scopeSpans)
        for (const s of scope.spans)
          spans.push({
            service,
            traceId: s.traceId,
            spanId: s.spanId,
            ...(s.parentSpanId ? { parentSpanId: s.parentSpanId } : {}),
            name: s.name,
            kind: s.kind,
            startNs: BigInt(s.startTimeUnixNano),
            endNs: BigInt(s.endTimeUnixNano),
            attributes: attrs(s.attributes),
            links: s.links ?? [],
            error: s.status?.code === 2,
          });
    }
  }
  return spans;
}

const KIND = {
  1: { label: 'INTERNAL', color: '#8a94a6' },
  2: { label: 'SERVER', color: '#a06cd5' },
  3: { label: 'CLIENT', color: '#e8913a' },
  4: { label: 'PRODUCER', color: '#3a7be8' },
  5: { label: 'CONSUMER', color: '#2fa36b' },
} as Record<number, { label: string; color: string }>;

const escape = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * The waterfall of the trace `traceId`, then the spans of other traces that link into it (the
 * dispatcher's batch spans), each under a caption saying so.
 */
export function renderWaterfall(
  spans: readonly ExportedSpan[],
  traceId: string,
  title: string,
): string {
  const inTrace = spans.filter((s) => s.traceId === traceId);
  const ids = new Set(inTrace.map((s) => s.spanId));
  const linked = spans.filter(
    (s) => s.traceId !== traceId && s.links.some((l) => l.traceId === traceId),
  );
  const rows: { span: ExportedSpan; depth: number }[] = [];
  const children = (parent: string | undefined) =>
    inTrace
      .filter((s) =>
        parent === undefined ? !ids.has(s.parentSpanId ?? '') : s.parentSpanId === parent,
      )
      .sort((a, b) => (a.startNs < b.startNs ? -1 : 1));
  const walk = (span: ExportedSpan, depth: number) => {
    rows.push({ span, depth });
    for (const child of children(span.spanId)) walk(child, depth + 1);
  };
  for (const root of children(undefined)) walk(root, 0);
  const linkedRows = linked.map((span) => ({ span, depth: 0 }));

  const all = [...rows, ...linkedRows].map((r) => r.span);
  const t0 = all.reduce((m, s) => (s.startNs < m ? s.startNs : m), all[0]!.startNs);
  const t1 = all.reduce((m, s) => (s.endNs > m ? s.endNs : m), all[0]!.endNs);
  const totalMs = Number(t1 - t0) / 1e6;

  const width = 1100;
  const labelWidth = 430;
  const barX = labelWidth + 10;
  const barWidth = width - barX - 150;
  const rowHeight = 26;
  const top = 78;
  const captionHeight = 30;
  const height = top + (rows.length + linkedRows.length) * rowHeight + captionHeight + 60;
  const x = (ns: bigint) => barX + (Number(ns - t0) / 1e6 / totalMs) * barWidth;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="ui-sans-serif, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    `<text x="16" y="26" font-size="16" font-weight="600" fill="#1f2430">${escape(title)}</text>`,
    `<text x="16" y="46" fill="#5b6373">trace ${traceId} · ${rows.length} spans, ${linkedRows.length} linked · ${totalMs.toFixed(1)} ms · rendered from the spans both services exported over OTLP/HTTP JSON</text>`,
  );
  // Time axis.
  const step = niceStep(totalMs);
  for (let ms = 0; ms <= totalMs + 1e-9; ms += step) {
    const px = barX + (ms / totalMs) * barWidth;
    out.push(
      `<line x1="${px.toFixed(1)}" y1="${top - 12}" x2="${px.toFixed(1)}" y2="${height - 40}" stroke="#eef0f4"/>`,
      `<text x="${px.toFixed(1)}" y="${top - 16}" fill="#8a94a6" text-anchor="middle">${formatMs(ms)}</text>`,
    );
  }
  const drawRow = (span: ExportedSpan, depth: number, y: number) => {
    const kind = KIND[span.kind] ?? KIND[1]!;
    const x1 = x(span.startNs);
    const w = Math.max(2, x(span.endNs) - x1);
    const ms = Number(span.endNs - span.startNs) / 1e6;
    const system = span.attributes['messaging.system'];
    out.push(
      `<text x="${16 + depth * 16}" y="${y + 16}" fill="#1f2430"><tspan fill="#8a94a6">${escape(span.service)}</tspan>  ${escape(span.name)}${system ? `<tspan fill="#8a94a6">  ${escape(String(system))}</tspan>` : ''}</text>`,
      `<rect x="${x1.toFixed(1)}" y="${y + 5}" width="${w.toFixed(1)}" height="15" rx="3" fill="${kind.color}"${span.error ? ' stroke="#d64545" stroke-width="2"' : ''}/>`,
      `<text x="${(x1 + w + 6).toFixed(1)}" y="${y + 16}" fill="#5b6373">${formatMs(ms)} · ${kind.label}</text>`,
    );
  };
  rows.forEach((row, i) => drawRow(row.span, row.depth, top + i * rowHeight));
  let y = top + rows.length * rowHeight + 8;
  if (linkedRows.length > 0) {
    out.push(
      `<text x="16" y="${y + 14}" fill="#5b6373" font-style="italic">linked from another trace — the dispatcher's batch span (claim → publish → settle) links to each message's create span, and each send span links back to it</text>`,
    );
    y += captionHeight - 8;
    linkedRows.forEach((row, i) => drawRow(row.span, 0, y + i * rowHeight));
    y += linkedRows.length * rowHeight;
  }
  // Legend.
  let lx = 16;
  for (const kind of [KIND[1]!, KIND[4]!, KIND[5]!, KIND[3]!]) {
    out.push(
      `<rect x="${lx}" y="${height - 26}" width="12" height="12" rx="2" fill="${kind.color}"/>`,
      `<text x="${lx + 18}" y="${height - 16}" fill="#5b6373">${kind.label}</text>`,
    );
    lx += 110;
  }
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function niceStep(totalMs: number): number {
  const raw = totalMs / 8;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (m * power >= raw) return m * power;
  return 10 * power;
}

function formatMs(ms: number): string {
  return ms >= 100
    ? `${Math.round(ms)} ms`
    : ms >= 10
      ? `${ms.toFixed(1)} ms`
      : `${ms.toFixed(2)} ms`;
}
