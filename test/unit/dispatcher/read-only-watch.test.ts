import { describe, expect, it } from 'vitest';
import { TypedEmitter, type DispatcherEventMap } from '../../../src/dispatcher/events.js';
import { isReadOnlyError, watchReadOnly } from '../../../src/dispatcher/read-only-watch.js';

const readOnly = Object.assign(new Error('cannot execute UPDATE in a read-only transaction'), {
  code: '25006',
});

describe('watchReadOnly', () => {
  it('tells a read-only spell once, and its end once, whatever the number of polls', () => {
    const events = new TypedEmitter<DispatcherEventMap>();
    let clock = 1_000;
    watchReadOnly(events, () => clock);
    const seen: string[] = [];
    events.on('dispatcher:database:read-only', ({ error }) => seen.push(`ro ${error.message}`));
    events.on('dispatcher:database:writable', ({ readOnlyMs }) => seen.push(`rw ${readOnlyMs}`));

    events.emit('dispatcher:claim:failure', {
      error: new Error('connection refused'),
      retryInMs: 1,
    });
    for (let i = 0; i < 5; i++)
      events.emit('dispatcher:claim:failure', { error: readOnly, retryInMs: 1 });
    events.emit('dispatcher:settle:failure', { owner: 'o', error: readOnly, messages: 3 });
    clock += 4_000;
    events.emit('dispatcher:claim:success', { owner: 'o', count: 0, durationMs: 1 });
    events.emit('dispatcher:claim:success', { owner: 'o', count: 0, durationMs: 1 });
    events.emit('dispatcher:settle:failure', { owner: 'o', error: readOnly, messages: 3 });

    expect(seen).toEqual([
      'ro cannot execute UPDATE in a read-only transaction',
      'rw 4000',
      'ro cannot execute UPDATE in a read-only transaction',
    ]);
  });

  it('knows SQLSTATE 25006 and nothing else', () => {
    expect(isReadOnlyError(readOnly)).toBe(true);
    expect(isReadOnlyError(Object.assign(new Error('x'), { code: '08006' }))).toBe(false);
    expect(isReadOnlyError('25006')).toBe(false);
  });
});
