import { InMemoryPublisher } from '../../src/publishers/memory/in-memory-publisher.js';
import { toEnvelope } from '../../src/publishers/envelope.js';
import { createCollector } from './collector.js';
import { describePublisherConformance } from './publisher-conformance.js';

describePublisherConformance({
  name: 'InMemoryPublisher',
  capabilities: {
    dedupesById: false,
    ordersPerAggregate: true,
    carriesNativeId: false,
    // Takes any batch in one call and any size: nothing to exercise.
    batchLimit: undefined,
    maxMessageBytes: undefined,
    failingStatus: 'permanent',
    failingMessage: (message) => ({
      ...message,
      headers: { ...message.headers, 'x-test-fail': '1' },
    }),
  },
  create: () =>
    new InMemoryPublisher({
      inject: (message) =>
        message.headers['x-test-fail'] ? { status: 'permanent', error: 'injected' } : undefined,
    }),
  collector: createCollector,
  async receive(topics, collector, publisher) {
    const unsubscribe = (publisher as InMemoryPublisher).subscribe((message) => {
      if (topics.includes(message.topic)) {
        collector.push({ body: JSON.stringify(toEnvelope(message)) });
      }
    });
    return async () => {
      unsubscribe();
    };
  },
});
