import { describe, expect, it } from 'vitest';
import { checkPublisherScheme, shownPublisher } from '../../../src/cli/dispatch/publisher-flags.js';
import { UsageError } from '../../../src/cli/usage-error.js';
import { connectOptions, NatsUrlError } from '../../../src/publishers/nats/connect-options.js';
import { NatsJetStreamPublisher } from '../../../src/publishers/nats/nats-jetstream-publisher.js';

describe('NATS connectOptions: one server or a cluster list (issue 44)', () => {
  it('moves credentials out of a single URL and keeps one server as a string', () => {
    expect(connectOptions('nats://user:p%40ss@nats.example:4333')).toEqual({
      servers: 'nats.example:4333',
      name: 'agent-outbox',
      user: 'user',
      pass: 'p@ss',
    });
    expect(connectOptions('nats://tok3n@127.0.0.1')).toMatchObject({
      servers: '127.0.0.1:4222',
      token: 'tok3n',
    });
  });

  it("reads the client's own list syntax, every server in the order given", () => {
    expect(connectOptions('nats://h:4301,nats://h:4302, nats://h:4303')).toEqual({
      servers: ['h:4301', 'h:4302', 'h:4303'],
      name: 'agent-outbox',
    });
    // An entry without a scheme takes the first one's; a port-less one gets 4222.
    expect(connectOptions('nats://a:4301,b:4302,c').servers).toEqual([
      'a:4301',
      'b:4302',
      'c:4222',
    ]);
  });

  it('takes credentials from whichever entry carries them, once', () => {
    expect(connectOptions('nats://h:4301,nats://u:pw@h:4302,nats://u:pw@h:4303')).toEqual({
      servers: ['h:4301', 'h:4302', 'h:4303'],
      name: 'agent-outbox',
      user: 'u',
      pass: 'pw',
    });
    expect(() => connectOptions('nats://u:a@h:4301,nats://u:b@h:4302')).toThrow(
      /different credentials/,
    );
  });

  it('keeps tls:// and wss:// entries whole, without their login', () => {
    expect(connectOptions('tls://u:pw@h:4443,tls://h2:4443')).toEqual({
      servers: ['tls://h:4443', 'tls://h2:4443'],
      name: 'agent-outbox',
      user: 'u',
      pass: 'pw',
    });
  });

  it('refuses what is not a server list, saying how to write one and without the password', () => {
    for (const bad of [
      'nats://h:4301,,nats://h:4302',
      'nats://h:4301,http://h:80',
      'nats://u:secret@h:99999',
    ]) {
      let error: unknown;
      try {
        connectOptions(bad);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(NatsUrlError);
      expect((error as Error).message).toMatch(/nats:\/\/h/);
      expect((error as Error).message).not.toContain('secret');
    }
  });

  it('the publisher takes a list, and refuses a bad one when it is built, not on every publish', () => {
    expect(
      () => new NatsJetStreamPublisher({ connection: 'nats://h:4301,nats://h:4302' }),
    ).not.toThrow();
    expect(() => new NatsJetStreamPublisher({ connection: 'nats://h:4301,,' })).toThrow(
      NatsUrlError,
    );
  });

  it('outbox dispatch --publisher: a list passes, an unreadable one is a usage error (exit 2)', () => {
    expect(() => checkPublisherScheme('nats://h:4301,nats://h:4302,nats://h:4303')).not.toThrow();
    expect(() => checkPublisherScheme('nats://h:4301,nats://h:x')).toThrow(UsageError);
  });

  it('the startup line shows a list entry by entry, without passwords', () => {
    expect(shownPublisher('nats://h:4301,nats://u:pw@h:4302')).toBe(
      'nats://h:4301,nats://u:***@h:4302',
    );
  });
});
