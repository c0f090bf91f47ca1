import { describe, expect, it } from 'vitest';
import type { OutboxStatus } from '../../../src/admin/status.js';
import { renderStatus } from '../../../src/cli/format/status-view.js';
import { colors, table, visibleLength } from '../../../src/cli/format/table.js';

const status: OutboxStatus = {
  backlog: 1500,
  oldestPendingAgeSeconds: 754,
  dueNow: 1200,
  inFlight: 200,
  scheduled: 100,
  deadLetters: 2,
  awaitingApproval: 0,
  oldestAwaitingApprovalAgeSeconds: 0,
  rejected: 0,
  expired: 0,
  pausedRoutes: [],
  attempts: [
    { attempts: 0, messages: 1400 },
    { attempts: 7, messages: 98 },
  ],
  lastErrors: [
    {
      id: '42',
      messageId: '5f0c0c38-7d3e-4b0e-9c55-6a1f3b0e9a11',
      topic: 'payment.charge',
      aggregateId: 'order:7',
      attempts: 7,
      lastError: 'HTTP 503 from https://payments.example/charge\nretry later',
      dead: false,
    },
  ],
};

describe('outbox status human output', () => {
  it('with --engine lanes: marks an estimated backlog and names the lanes commands', () => {
    const text = renderStatus(
      { ...status, backlogEstimated: true } as OutboxStatus,
      colors({ isTTY: false }, {}),
      { engine: 'lanes' },
    );
    expect(text).toContain('backlog         ~1500  (estimated past a window of each lane)\n');
    expect(text).toContain(
      'outbox dead list --engine lanes · outbox replay --engine lanes --all-dead',
    );
    const exact = renderStatus(status, colors({ isTTY: false }, {}), { engine: 'lanes' });
    expect(exact).toContain('backlog         1500\n');
  });

  it('is a plain aligned table without a TTY', () => {
    const text = renderStatus(status, colors({ isTTY: false }, {}));
    expect(text.includes('\x1b[')).toBe(false);
    expect(text).toContain('backlog         1500\n');
    expect(text).toContain('oldest pending  12.6m\n');
    expect(text).toContain('dead letters    2  outbox dead list · outbox replay --all-dead');
    expect(text).toMatch(
      / {2}#42 {2}payment\.charge {2}order:7 +7 {2}retrying {2}HTTP 503 from https:\/\/payments\.example\/charge retry later\n/,
    );
  });

  it('colours what the alert rules would fire on when stdout is a TTY, unless NO_COLOR', () => {
    const text = renderStatus(status, colors({ isTTY: true }, {}));
    expect(text).toContain('\x1b[33m1500\x1b[39m'); // backlog > 1000: yellow
    expect(text).toContain('\x1b[31m\x1b[1m2\x1b[22m\x1b[39m'); // dead letters: bold red
    expect(text).toContain('\x1b[33m7\x1b[39m'); // attempts > 5: yellow
    expect(renderStatus(status, colors({ isTTY: true }, { NO_COLOR: '1' })).includes('\x1b[')).toBe(
      false,
    );
    expect(
      renderStatus(status, colors({ isTTY: false }, { FORCE_COLOR: '1' })).includes('\x1b['),
    ).toBe(true);
  });

  it('shows held messages (issue 20) only when there are any, yellow past the 1 h alert', () => {
    expect(renderStatus(status, colors({ isTTY: false }, {}))).not.toContain('approvals');
    const held = {
      ...status,
      awaitingApproval: 3,
      oldestAwaitingApprovalAgeSeconds: 7560,
      rejected: 1,
      expired: 2,
    };
    expect(renderStatus(held, colors({ isTTY: false }, {}))).toContain(
      'approvals       3 waiting (oldest 2.1h) · 1 rejected · 2 expired  outbox approvals\n',
    );
    expect(renderStatus(held, colors({ isTTY: true }, {}))).toContain(
      '\x1b[33m3 waiting (oldest 2.1h)\x1b[39m',
    );
  });

  it('aligns columns by visible width, ignoring colour codes', () => {
    const c = colors({ isTTY: true }, {});
    const lines = table([
      [c.red('a'), 'x'],
      ['bbb', 'y'],
    ]).split('\n');
    expect(lines.map((l) => visibleLength(l))).toEqual([6, 6]);
  });

  it('--shadow adds shadow vs live per topic', () => {
    const text = renderStatus({ ...status, lastErrors: [], attempts: [] }, colors({}, {}), {
      shadowWindow: '24h',
      shadow: [
        { topic: 'mail.send', shadow: 10, live: 10, shadowDispatched: 10, liveDispatched: 9 },
        { topic: 'payment.charge', shadow: 12, live: 10, shadowDispatched: 12, liveDispatched: 10 },
        { topic: 'sms.send', shadow: 0, live: 4, shadowDispatched: 0, liveDispatched: 4 },
      ],
    });
    expect(text).toContain('shadow vs live, last 24h');
    expect(text).toMatch(/mail\.send +10 +10 +10 +9 +=\n/);
    expect(text).toMatch(/payment\.charge +12 +12 +10 +10 +\+2\n/);
    expect(text).toMatch(/sms\.send +0 +0 +4 +4 +live only\n/);
  });
});

describe('duration flags', () => {
  it('reads 30d, 12h, 90m, 45s, 500ms and combinations; refuses bare numbers', async () => {
    const { parseDuration, formatDuration } = await import('../../../src/cli/format/duration.js');
    expect(parseDuration('x', '30d')).toBe(30 * 86_400_000);
    expect(parseDuration('x', '1d12h')).toBe(36 * 3_600_000);
    expect(parseDuration('x', '90m')).toBe(5_400_000);
    expect(parseDuration('x', '500ms')).toBe(500);
    expect(formatDuration(36 * 3_600_000)).toBe('1d12h');
    for (const bad of ['30', 'd', '', '3x', '-1d', '1d 2h'])
      expect(() => parseDuration('older-than', bad)).toThrow(/--older-than must be a duration/);
  });
});
