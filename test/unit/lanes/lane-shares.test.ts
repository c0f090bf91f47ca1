import { describe, expect, it } from 'vitest';
import { lastRegularLane, withShares } from '../../../src/lanes/lane-shares.js';

/** The shares of an `outbox_lane_next` call as the lane dispatcher takes them (migration 028). */
const row = (
  lane: number,
  id: number,
  message = true,
  topic: string | null = null,
): {
  lane: number;
  id: string;
  message_id: string | null;
  topic: string | null;
  share?: boolean;
} => ({
  lane,
  id: String(id),
  message_id: message ? `m-${lane}-${id}` : null,
  topic,
});

describe('withShares', () => {
  it('returns the rows as they came when the call brought no shares', () => {
    const rows = [row(0, 5), row(0, 9, false)];
    const tenants = new Map<number, string>();
    expect(withShares(rows, new Map([[0, '4']]), tenants)).toEqual(rows);
    expect(tenants.size).toBe(0);
  });

  it('keeps a share above how far its lane was read, drops one the read returned, takes the tenant cursors', () => {
    const rows = [
      row(3, 10),
      row(3, 12), // lane 3 filled the batch at 12
      row(-2, 0, false), // the marker
      row(3, 11), // returned by the read already
      row(3, 12), // the read's last row: returned already
      row(3, 40),
      row(5, 30), // lane 5 not read: above its position
      row(5, 7), // at or below its position: handled before
      row(3, 0, false, 'tenant-b'),
      row(5, 0, false, 'tenant-c'),
    ];
    const tenants = new Map<number, string>([[5, 'tenant-a']]);
    const read = withShares(
      rows,
      new Map([
        [3, '9'],
        [5, '20'],
      ]),
      tenants,
    );
    expect(read.map((r) => [r.lane, r.id, r.share ?? false])).toEqual([
      [3, '10', false],
      [3, '12', false],
      [3, '40', true],
      [5, '30', true],
    ]);
    expect([...tenants]).toEqual([
      [5, 'tenant-c'],
      [3, 'tenant-b'],
    ]);
    expect(lastRegularLane(read)).toBe(3);
  });

  it('drops every share of a lane its read ran to the end of (marker at the largest id)', () => {
    const rows = [row(1, 4), row(1, Number.MAX_SAFE_INTEGER, false), row(-2, 0, false), row(1, 8)];
    const read = withShares(rows, new Map([[1, '0']]), new Map());
    expect(read.filter((r) => r.share)).toEqual([]);
  });
});
