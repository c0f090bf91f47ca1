import type {
  OutgoingMessage,
  PublishOptions,
  PublishOutcome,
  Publisher,
} from '../../../src/publishers/publisher.js';

/** A scriptable publisher that records its calls. */
export class FakePublisher implements Publisher {
  readonly calls: { messages: OutgoingMessage[]; options: PublishOptions | undefined }[] = [];
  closed = 0;
  /** Decides the outcomes of a call; default: all published. */
  behaviour: (
    messages: readonly OutgoingMessage[],
  ) => Promise<PublishOutcome[]> | PublishOutcome[] = (messages) =>
    messages.map(() => ({ status: 'published' }));

  async publish(
    messages: readonly OutgoingMessage[],
    options?: PublishOptions,
  ): Promise<PublishOutcome[]> {
    this.calls.push({ messages: [...messages], options });
    return this.behaviour(messages);
  }

  async close(): Promise<void> {
    this.closed++;
  }
}
