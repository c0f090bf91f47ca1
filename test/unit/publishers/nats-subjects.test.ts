import { describe, expect, it } from 'vitest';
import {
  captures,
  CREATED_BY_DISPATCHER,
  invalidSubjectReason,
  JetStreamStream,
  subjectCovers,
  subjectPattern,
} from '../../../src/publishers/nats/jetstream-stream.js';
import type { NatsJetStreamManagerLike } from '../../../src/publishers/nats/nats-client.js';

describe('subjectPattern', () => {
  it('widens a topic to its first segment', () => {
    expect(subjectPattern('mail.send')).toBe('mail.>');
    expect(subjectPattern('payment.refund.partial')).toBe('payment.>');
    expect(subjectPattern('audit')).toBe('audit');
  });
});

describe('subjectCovers', () => {
  it.each([
    ['>', 'mail.>', true],
    ['>', 'audit', true],
    ['mail.>', 'mail.>', true],
    ['mail.*', 'mail.>', false],
    ['mail.send', 'mail.>', false],
    ['*.>', 'mail.>', true],
    ['mail.>', 'mail', false],
    ['audit', 'audit', true],
    ['*', 'audit', true],
    ['audit', 'audits', false],
    ['mail.>', 'mailer.>', false],
    // Concrete subjects (issue 17): `*` is one token, `>` one or more trailing tokens.
    ['orders.created', 'orders.created', true],
    ['orders.created.>', 'orders.created', false],
    ['orders.created.>', 'orders.created.eu', true],
    ['orders.created.>', 'orders.created.eu.north', true],
    ['orders.*', 'orders.created', true],
    ['orders.*', 'orders.created.eu', false],
    ['*.created', 'orders.created', true],
    ['orders.>', 'orders', false],
    ['orders', 'orders.created', false],
  ] as const)('%s covers %s: %s', (filter, pattern, expected) => {
    expect(subjectCovers(filter, pattern)).toBe(expected);
  });

  it('captures: any of a stream’s subjects', () => {
    expect(captures(['orders.created.>', 'orders.created'], 'orders.created')).toBe(true);
    expect(captures(['orders.created.>'], 'orders.created')).toBe(false);
    expect(captures([], 'orders.created')).toBe(false);
  });
});

describe('invalidSubjectReason', () => {
  it.each([
    ['orders.created', undefined],
    ['orders.*.refund', undefined],
    ['audit.>', undefined],
    ['>', undefined],
    ['', 'is empty'],
    ['orders created', 'contains whitespace'],
    ['orders..created', 'has an empty token'],
    ['orders.', 'has an empty token'],
    ['orders.>.x', '">" must be a whole token, and the last one'],
    ['orders.x>', '">" must be a whole token, and the last one'],
    ['orders.cr*', '"*" must be a whole token'],
  ])('%j: %s', (subject, reason) => {
    expect(invalidSubjectReason(subject)).toBe(reason);
  });
});

/** A JetStream manager holding streams in memory, recording every call that writes. */
function fakeManager(initial: Record<string, { subjects: string[]; description?: string }>) {
  const streams = new Map(Object.entries(initial));
  const writes: string[] = [];
  const manager: NatsJetStreamManagerLike = {
    streams: {
      info: async (name) => {
        const config = streams.get(name);
        if (!config) throw Object.assign(new Error('stream not found'), { code: '404' });
        return { config: { name, ...config } };
      },
      add: async (config) => {
        writes.push(`add ${config.name} ${config.subjects.join(',')}`);
        if (streams.has(config.name)) throw new Error('stream name already in use');
        streams.set(config.name, { subjects: config.subjects, description: config.description });
        return {};
      },
      update: async (name, config) => {
        writes.push(`update ${name} ${config.subjects.join(',')}`);
        streams.set(name, { ...streams.get(name)!, subjects: config.subjects });
        return {};
      },
    },
  };
  return { manager, streams, writes };
}

describe('JetStreamStream', () => {
  it('never writes to a stream it did not create, whatever it is asked to publish', async () => {
    const { manager, writes } = fakeManager({ ORDERS: { subjects: ['orders.created'] } });
    const stream = new JetStreamStream(manager, 'ORDERS', undefined);
    expect(await stream.uncovered(['orders.created', 'orders.cancelled', 'audit'])).toEqual([
      'orders.cancelled',
      'audit',
    ]);
    expect(await stream.uncovered(['orders.created'])).toEqual([]);
    const fixed = new JetStreamStream(manager, 'ORDERS', ['orders.>']);
    expect(await fixed.uncovered(['orders.cancelled'])).toEqual(['orders.cancelled']);
    expect(writes).toEqual([]);
  });

  it('creates a missing stream, marked as its own, and grows only that one', async () => {
    const { manager, streams, writes } = fakeManager({});
    const stream = new JetStreamStream(manager, 'OUTBOX', undefined);
    expect(await stream.uncovered(['mail.send', 'mail.bounce'])).toEqual([]);
    expect(await stream.uncovered(['audit'])).toEqual([]);
    expect(writes).toEqual(['add OUTBOX mail.>', 'update OUTBOX mail.>,audit']);
    expect(streams.get('OUTBOX')).toEqual({
      subjects: ['mail.>', 'audit'],
      description: CREATED_BY_DISPATCHER,
    });
    // Another process (or this one after a restart) sees the marker and may grow it too.
    const later = new JetStreamStream(manager, 'OUTBOX', undefined);
    expect(await later.uncovered(['billing.charge'])).toEqual([]);
    expect(writes.at(-1)).toBe('update OUTBOX mail.>,audit,billing.>');
  });

  it('creates a missing stream with the fixed subjects and never grows it', async () => {
    const { manager, writes } = fakeManager({});
    const stream = new JetStreamStream(manager, 'OUTBOX', ['orders.created', 'orders.shipped']);
    expect(await stream.uncovered(['orders.created', 'orders.cancelled'])).toEqual([
      'orders.cancelled',
    ]);
    expect(writes).toEqual(['add OUTBOX orders.created,orders.shipped']);
  });

  it('uses a stream someone else created first, under the rules for an existing one', async () => {
    const { manager, streams, writes } = fakeManager({});
    const add = manager.streams.add;
    // The operator creates ORDERS between our read (missing) and our add.
    manager.streams.add = async (config) => {
      streams.set('ORDERS', { subjects: ['orders.created'] });
      return add(config);
    };
    const stream = new JetStreamStream(manager, 'ORDERS', undefined);
    expect(await stream.uncovered(['orders.created', 'orders.cancelled'])).toEqual([
      'orders.cancelled',
    ]);
    expect(writes).toEqual(['add ORDERS orders.>']);
    expect(streams.get('ORDERS')).toEqual({ subjects: ['orders.created'] });
  });
});
