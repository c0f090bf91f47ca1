/**
 * `agent-outbox/publishers/sqs`: Amazon SQS (FIFO or standard) publisher. Peer dependency:
 * `@aws-sdk/client-sqs` (v3).
 * @packageDocumentation
 */
export {
  chunkEntries,
  SQS_BATCH_LIMIT,
  SqsPublisher,
  type SqsPublisherOptions,
} from './sqs-publisher.js';
export type {
  SqsBatchEntry,
  SqsClientLike,
  SqsModuleLike,
  SqsSendMessageBatchInput,
  SqsSendMessageBatchOutput,
} from './sqs-client.js';
