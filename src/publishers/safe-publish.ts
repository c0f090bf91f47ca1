import { allRetryable, retryable } from './outcomes.js';
import type { OutgoingMessage, PublishOptions, PublishOutcome, Publisher } from './publisher.js';

/**
 * Calls `publisher` and holds it to the contract: a throw becomes `retryable` for every message,
 * and a result of the wrong length (a bug in the publisher) becomes `retryable` too, rather than
 * pairing outcomes with the wrong messages. Used by the router and middleware, which combine
 * publishers they did not write.
 */
export async function safePublish(
  publisher: Publisher,
  messages: readonly OutgoingMessage[],
  options?: PublishOptions,
): Promise<PublishOutcome[]> {
  if (messages.length === 0) return [];
  let outcomes: PublishOutcome[];
  try {
    outcomes = await publisher.publish(messages, options);
  } catch (error) {
    return allRetryable(messages.length, error);
  }
  if (!Array.isArray(outcomes) || outcomes.length !== messages.length) {
    const got = Array.isArray(outcomes) ? outcomes.length : typeof outcomes;
    return messages.map(() =>
      retryable(`publisher returned ${got} outcomes for ${messages.length} messages`),
    );
  }
  return outcomes;
}
