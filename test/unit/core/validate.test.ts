import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../../src/core/errors.js';
import { validateMessage, validateMessages } from '../../../src/core/validate.js';

const good = { topic: 'payment.charge', aggregateId: 'order:1', payload: { amount: 1 } };

function rejection(
  message: unknown,
  limits?: { maxPayloadBytes: number; maxHeadersBytes: number },
): OutboxValidationError {
  try {
    validateMessage(message, limits);
  } catch (error) {
    expect(error).toBeInstanceOf(OutboxValidationError);
    return error as OutboxValidationError;
  }
  throw new Error(`expected ${String(message)} to be rejected`);
}

describe('validateMessage: each bad input of SPEC §6 names its field', () => {
  const cyclic: Record<string, unknown> = { a: 1 };
  cyclic.self = cyclic;
  const cases: [string, unknown, string][] = [
    ['empty topic', { ...good, topic: '' }, 'message.topic'],
    ['blank topic', { ...good, topic: '   ' }, 'message.topic'],
    ['oversized topic', { ...good, topic: 't'.repeat(256) }, 'message.topic'],
    ['non-string topic', { ...good, topic: 42 }, 'message.topic'],
    ['empty aggregate id', { ...good, aggregateId: '' }, 'message.aggregateId'],
    ['oversized aggregate id', { ...good, aggregateId: 'a'.repeat(256) }, 'message.aggregateId'],
    ['numeric aggregate id', { ...good, aggregateId: 7 }, 'message.aggregateId'],
    ['cyclic payload', { ...good, payload: cyclic }, 'message.payload.self'],
    ['BigInt payload', { ...good, payload: { n: 1n } }, 'message.payload.n'],
    ['function payload', { ...good, payload: { f: () => 1 } }, 'message.payload.f'],
    ['symbol payload', { ...good, payload: Symbol('x') }, 'message.payload'],
    ['undefined payload', { ...good, payload: undefined }, 'message.payload'],
    ['missing payload', { topic: 't', aggregateId: 'a' }, 'message.payload'],
    ['undefined in array', { ...good, payload: [1, undefined] }, 'message.payload[1]'],
    ['NaN in payload', { ...good, payload: { x: NaN } }, 'message.payload.x'],
    ['Infinity in payload', { ...good, payload: [Infinity] }, 'message.payload[0]'],
    ['Map payload', { ...good, payload: new Map() }, 'message.payload'],
    ['NUL in payload string', { ...good, payload: { s: 'a\u0000b' } }, 'message.payload.s'],
    ['lone surrogate', { ...good, payload: '\ud800' }, 'message.payload'],
    [
      'deep in arrays and objects',
      { ...good, payload: { items: [{ a: 1 }, { b: [0, 'x', { c: 1n }] }] } },
      'message.payload.items[1].b[2].c',
    ],
    [
      'lone surrogate deep',
      { ...good, payload: { items: ['ok 🎉', { s: 'a\udc00' }] } },
      'message.payload.items[1].s',
    ],
    [
      'NUL in a key',
      { ...good, payload: { n: { 'a\u0000': 1 } } },
      'message.payload.n key "a\\u0000"',
    ],
    ['non-string header', { ...good, headers: { a: 1 } }, 'message.headers.a'],
    ['headers array', { ...good, headers: ['a'] }, 'message.headers'],
    ['empty header name', { ...good, headers: { '': 'x' } }, 'message.headers'],
    ['negative delay', { ...good, delayMs: -1 }, 'message.delayMs'],
    ['NaN delay', { ...good, delayMs: NaN }, 'message.delayMs'],
    ['string delay', { ...good, delayMs: '5' }, 'message.delayMs'],
    ['delay and availableAt', { ...good, delayMs: 1, availableAt: new Date() }, 'message.delayMs'],
    ['invalid availableAt', { ...good, availableAt: new Date('nope') }, 'message.availableAt'],
    ['not an object', 'hello', 'message'],
    ['null', null, 'message'],
  ];
  it.each(cases)('%s', (_name, message, field) => {
    expect(rejection(message).field).toBe(field);
  });

  it('accepts paired surrogates (emoji) anywhere, and skips holes of sparse arrays as JSON does', () => {
    // eslint-disable-next-line no-sparse-arrays
    const sparse = [1, , 3];
    const valid = validateMessage({ ...good, payload: { '🎉': ['🎉 ok', sparse] } });
    expect(valid.payloadJson).toBe('{"🎉":["🎉 ok",[1,null,3]]}');
  });

  it('payload over the limit', () => {
    const error = rejection(
      { ...good, payload: 'x'.repeat(200) },
      { maxPayloadBytes: 100, maxHeadersBytes: 1000 },
    );
    expect(error.field).toBe('message.payload');
    expect(error.message).toMatch(/limit is 100/);
  });

  it('counts UTF-8 bytes, not characters, at the limit', () => {
    const limits = { maxPayloadBytes: 100, maxHeadersBytes: 1000 };
    // "é" is 2 bytes and "€" 3 in UTF-8; the 2 quotes of the JSON string are 1 each.
    expect(() => validateMessage({ ...good, payload: 'é'.repeat(49) }, limits)).not.toThrow();
    expect(rejection({ ...good, payload: 'é'.repeat(50) }, limits).message).toMatch(
      /is 102 bytes serialised; the limit is 100/,
    );
    expect(() => validateMessage({ ...good, payload: '€'.repeat(32) }, limits)).not.toThrow();
    expect(rejection({ ...good, payload: '€'.repeat(33) }, limits).message).toMatch(/is 101 bytes/);
    expect(
      rejection(
        { ...good, headers: { note: '€'.repeat(400) } },
        { ...limits, maxHeadersBytes: 1000 },
      ).field,
    ).toBe('message.headers');
  });

  it('the default payload limit is 1 MiB', () => {
    expect(() => validateMessage({ ...good, payload: 'x'.repeat(1024 * 1024 - 2) })).not.toThrow();
    expect(rejection({ ...good, payload: 'x'.repeat(1024 * 1024) }).field).toBe('message.payload');
  });

  it('names the position in a batch', () => {
    expect(() => validateMessages([good, good, { ...good, topic: '' }])).toThrow(
      /messages\[2\]\.topic/,
    );
  });

  it('accepts Dates, nested objects, null payloads and omitted undefined properties', () => {
    const valid = validateMessage({
      ...good,
      payload: { at: new Date(0), nested: [{ a: null }], skip: undefined },
    });
    expect(JSON.parse(valid.payloadJson)).toEqual({
      at: '1970-01-01T00:00:00.000Z',
      nested: [{ a: null }],
    });
    expect(validateMessage({ ...good, payload: null }).payloadJson).toBe('null');
  });
});

describe('validateMessage properties', () => {
  it('any JSON value round-trips unchanged', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (payload) => {
        let valid;
        try {
          valid = validateMessage({ ...good, payload });
        } catch (error) {
          // Only strings Postgres cannot store (NUL, lone surrogates) may be refused.
          expect(String((error as Error).message)).toMatch(/NUL|surrogate|-0/);
          return;
        }
        expect(JSON.parse(valid.payloadJson)).toEqual(JSON.parse(JSON.stringify(payload)));
      }),
      { numRuns: 300 },
    );
  });

  it('anything that is not a string of 1-255 characters is refused as topic or aggregate id', () => {
    const badName = fc.oneof(
      fc.constant(''),
      fc.string({ minLength: 256, maxLength: 400 }),
      fc.integer(),
      fc.constant(null),
      fc.constant(undefined),
      fc.array(fc.string()),
      fc.stringMatching(/^\s+$/),
    );
    fc.assert(
      fc.property(badName, fc.boolean(), (name, asTopic) => {
        const message = asTopic ? { ...good, topic: name } : { ...good, aggregateId: name };
        expect(rejection(message).field).toBe(asTopic ? 'message.topic' : 'message.aggregateId');
      }),
    );
  });

  it('a header value that is not a string is always refused', () => {
    fc.assert(
      fc.property(fc.oneof(fc.integer(), fc.boolean(), fc.constant(null), fc.object()), (value) => {
        expect(rejection({ ...good, headers: { h: value } }).field).toBe('message.headers.h');
      }),
    );
  });

  it('a negative or non-finite delay is always refused', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.double({ max: -Number.MIN_VALUE }), fc.constant(NaN), fc.constant(Infinity)),
        (delayMs) => {
          expect(rejection({ ...good, delayMs }).field).toBe('message.delayMs');
        },
      ),
    );
  });

  it('payloads containing a BigInt or a function anywhere are refused', () => {
    const poison = fc.oneof(
      fc.bigInt().map((b) => b as unknown),
      fc.constant(() => 1),
    );
    fc.assert(
      fc.property(fc.jsonValue(), poison, fc.nat(5), (base, bad, depth) => {
        let payload: unknown = bad;
        for (let i = 0; i < depth; i++) payload = i % 2 ? { k: payload, base } : [base, payload];
        expect(rejection({ ...good, payload }).field.startsWith('message.payload')).toBe(true);
      }),
    );
  });
});
