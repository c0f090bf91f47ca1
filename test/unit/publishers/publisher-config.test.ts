import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import {
  createPublisherFromConfig,
  loadPublisherConfig,
  parsePublisherConfig,
  PublisherConfigError,
} from '../../../src/publishers/publisher-config.js';
import { Router } from '../../../src/publishers/router.js';
import { makeMessage } from '../../contract/messages.js';

describe('parsePublisherConfig', () => {
  it.each([
    [null, 'must be an object'],
    [{}, 'needs "routes" or a "fallback"'],
    [{ routes: {} }, '"routes" must be an array'],
    [{ routes: [{ pattern: 'a.s*', publisher: 'memory://' }] }, 'routes[0].pattern'],
    [{ routes: [{ pattern: 'a', publisher: '' }] }, 'routes[0].publisher'],
    [
      { routes: [{ pattern: 'a', publisher: 'memory://', destination: 1 }] },
      'routes[0].destination',
    ],
    [{ fallback: 'memory://', extra: 1 }, 'unknown key "extra"'],
    [{ fallback: 'memory://', middleware: [] }, '"middleware" must be an object'],
  ])('rejects %j', (input, message) => {
    expect(() => parsePublisherConfig(input)).toThrow(PublisherConfigError);
    expect(() => parsePublisherConfig(input)).toThrow(message);
  });
});

describe('createPublisherFromConfig', () => {
  it('returns the fallback alone when there are no routes', async () => {
    expect(await createPublisherFromConfig({ fallback: 'memory://' })).toBeInstanceOf(
      InMemoryPublisher,
    );
  });

  it('builds a router that shares one publisher per URL', async () => {
    const publisher = await createPublisherFromConfig({
      routes: [
        { pattern: 'mail.*', publisher: 'memory://' },
        { pattern: 'sms.*', publisher: 'memory://', destination: 'sms' },
        { pattern: 'hook.*', publisher: 'http://127.0.0.1:1/hook' },
      ],
      middleware: { circuitBreaker: true, timeoutMs: 5000 },
    });
    expect(publisher).toBeInstanceOf(Router);
    const router = publisher as Router;
    expect(router.routeFor('mail.send')!.publisher).toBe(router.routeFor('sms.send')!.publisher);
    expect(router.routeFor('hook.x')!.publisher).not.toBe(router.routeFor('mail.send')!.publisher);
    expect(router.routeFor('sms.send')!.destination).toBe('sms');
    expect(
      await router.publish([makeMessage({ topic: 'mail.send' }), makeMessage({ topic: 'x' })]),
    ).toEqual([{ status: 'published' }, { status: 'permanent', error: 'no route for topic x' }]);
    await router.close();
  });
});

describe('loadPublisherConfig', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('reads JSON and module files', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ao-config-'));
    dirs.push(dir);
    await writeFile(join(dir, 'outbox.json'), JSON.stringify({ fallback: 'memory://' }));
    await writeFile(
      join(dir, 'outbox.config.mjs'),
      "export default { routes: [{ pattern: '**', publisher: 'memory://' }] };",
    );
    await writeFile(join(dir, 'broken.json'), '{ nope');

    expect(await loadPublisherConfig(join(dir, 'outbox.json'))).toEqual({ fallback: 'memory://' });
    expect((await loadPublisherConfig(join(dir, 'outbox.config.mjs'))).routes).toHaveLength(1);
    await expect(loadPublisherConfig(join(dir, 'broken.json'))).rejects.toThrow(
      PublisherConfigError,
    );
  });
});
