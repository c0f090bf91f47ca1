import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { bindInMemory } from '../../../src/consumer/bindings/in-memory.js';
import { InMemoryPublisher } from '../../../src/publishers/memory/in-memory-publisher.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';
import { createTestDatabase, type TestDatabase } from '../../helpers/database.js';
import { effectConsumer } from '../../fixtures/consumer/effects.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const outgoing = (payload: OutgoingMessage['payload'], topic = 'mail.send'): OutgoingMessage => ({
  id: randomUUID(),
  rowId: '1',
  topic,
  aggregateId: 'user:1',
  sequence: 1,
  payload,
  headers: {},
  createdAt: new Date(),
  attempts: 1,
});

it('delivers each published message once, redelivers after a failure, dead-letters poison', async () => {
  const publisher = new InMemoryPublisher();
  const { consumer, seen, effects } = await effectConsumer(db.pool, 'in-memory');
  const binding = bindInMemory(publisher, consumer, { topics: ['mail.send'] });
  const ok = outgoing({});
  const flaky = outgoing({ failTimes: 2 });
  const poison = outgoing({ permanent: true });
  const elsewhere = outgoing({}, 'other.topic');
  await publisher.publish([ok, flaky, poison, elsewhere]);
  await publisher.publish([ok]); // a duplicate publish (the dispatcher re-published after a crash)
  await binding.onIdle();
  expect((await effects()).sort()).toEqual([ok.id, flaky.id].sort());
  expect(seen.filter((id) => id === flaky.id)).toHaveLength(3);
  expect(seen).not.toContain(elsewhere.id);
  expect(binding.deadLetters.map((d) => [d.message.id, d.result.reason])).toEqual([
    [poison.id, 'permanent-failure'],
  ]);
  await binding.stop();
});
