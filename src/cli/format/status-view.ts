import type { OutboxStatus, ShadowComparison } from '../../admin/status.js';
import { formatAge, table, truncate, type Colors } from './table.js';

/** Thresholds at which `outbox status` turns a number yellow (the alert rules' values). */
export const STATUS_WARN = {
  backlog: 1000,
  oldestPendingAgeSeconds: 300,
  attempts: 5,
  oldestAwaitingApprovalAgeSeconds: 3600,
} as const;

/**
 * `outbox status` for people: a summary table whose numbers turn yellow or red where the alert
 * rules would fire, the attempts distribution, the latest errors, and (with `--shadow`) shadow vs
 * live counts per topic. Plain text without a TTY; `--json` stays the format for scripts.
 */
export function renderStatus(
  status: OutboxStatus,
  c: Colors,
  options: {
    shadow?: ShadowComparison[];
    shadowWindow?: string;
    width?: number;
    /** The lanes engine's status: its commands in the hints, an estimated backlog marked. */
    engine?: 'claims' | 'lanes';
  } = {},
): string {
  // Terminal width (process.stdout.columns) to fit errors on one line; none: up to 200 chars.
  const width = options.width;
  const warnIf = (cond: boolean, text: string) => (cond ? c.yellow(text) : text);
  const out: string[] = [];
  const dead =
    status.deadLetters > 0
      ? `${c.red(c.bold(String(status.deadLetters)))}  ${c.dim(
          options.engine === 'lanes'
            ? 'outbox dead list --engine lanes · outbox replay --engine lanes --all-dead'
            : 'outbox dead list · outbox replay --all-dead',
        )}`
      : c.green('0');
  // readLaneEngineStatus: a lane past its window of ids is estimated, not counted.
  const estimated = (status as { backlogEstimated?: boolean }).backlogEstimated === true;
  const backlog = estimated
    ? `~${status.backlog}  ${c.dim('(estimated past a window of each lane)')}`
    : String(status.backlog);
  out.push(
    table(
      [
        ['backlog', warnIf(status.backlog > STATUS_WARN.backlog, backlog)],
        [
          'oldest pending',
          warnIf(
            status.oldestPendingAgeSeconds > STATUS_WARN.oldestPendingAgeSeconds,
            formatAge(status.oldestPendingAgeSeconds),
          ),
        ],
        ['due now', String(status.dueNow)],
        ['in flight', String(status.inFlight)],
        ['scheduled', `${status.scheduled}  ${c.dim('(delayed or backing off)')}`],
        ['dead letters', dead],
        ...approvalRows(status, c),
      ].map(([k, v]) => [c.bold(k!), v!]),
    ),
  );
  if (status.pausedRoutes.length > 0) {
    out.push(
      '',
      c.bold('paused routes') + c.dim('  (destination down: messages wait, no attempts)'),
    );
    out.push(
      table(
        status.pausedRoutes.map((p) => [
          c.yellow(p.route),
          `probe ${p.pausedUntil.toISOString()}`,
          `${p.failedProbes} failed probes`,
          truncate(p.reason, 120),
        ]),
        { indent: '  ' },
      ),
    );
  }
  if (status.attempts.length > 0) {
    out.push('', c.bold('attempts of undispatched messages'));
    out.push(
      table(
        status.attempts.map((a) => [
          warnIf(a.attempts > STATUS_WARN.attempts, String(a.attempts)),
          String(a.messages),
        ]),
        { header: [c.dim('attempts'), c.dim('messages')], align: ['right', 'right'], indent: '  ' },
      ),
    );
  }
  if (status.lastErrors.length > 0) {
    out.push('', c.bold('last errors'));
    out.push(
      table(
        status.lastErrors.map((e) => [
          `#${e.id}`,
          e.topic,
          truncate(e.aggregateId, 24),
          String(e.attempts),
          e.dead ? c.red('dead') : c.yellow('retrying'),
          truncate(e.lastError, width === undefined ? 200 : Math.max(40, width - 60)),
        ]),
        {
          header: ['id', 'topic', 'aggregate', 'attempts', 'state', 'error'].map(c.dim),
          align: ['right', 'left', 'left', 'right'],
          indent: '  ',
        },
      ),
    );
  }
  if (options.shadow) {
    out.push('', c.bold(`shadow vs live, last ${options.shadowWindow ?? '24h'}`));
    if (options.shadow.length === 0) out.push(c.dim('  no messages in that window'));
    else
      out.push(
        table(
          options.shadow.map((s) => [
            s.topic,
            String(s.shadow),
            String(s.shadowDispatched),
            String(s.live),
            String(s.liveDispatched),
            compare(s, c),
          ]),
          {
            header: ['topic', 'shadow', 'dispatched', 'live', 'dispatched', 'shadow-live'].map(
              c.dim,
            ),
            align: ['left', 'right', 'right', 'right', 'right', 'right'],
            indent: '  ',
          },
        ),
      );
  }
  return `${out.join('\n')}\n`;
}

/** The approvals row, when anything is or was held (migration 010). */
function approvalRows(status: OutboxStatus, c: Colors): string[][] {
  if (status.awaitingApproval + status.rejected + status.expired === 0) return [];
  const oldest = status.oldestAwaitingApprovalAgeSeconds;
  const waiting =
    status.awaitingApproval === 0
      ? '0 waiting'
      : `${status.awaitingApproval} waiting (oldest ${formatAge(oldest)})`;
  return [
    [
      'approvals',
      `${oldest > STATUS_WARN.oldestAwaitingApprovalAgeSeconds ? c.yellow(waiting) : waiting} · ${status.rejected} rejected · ${status.expired} expired  ${c.dim('outbox approvals')}`,
    ],
  ];
}

function compare(s: ShadowComparison, c: Colors): string {
  if (s.shadow === s.live) return c.green('=');
  if (s.shadow === 0) return c.dim('live only');
  if (s.live === 0) return c.dim('shadow only');
  const diff = s.shadow - s.live;
  return c.yellow(`${diff > 0 ? '+' : ''}${diff}`);
}
